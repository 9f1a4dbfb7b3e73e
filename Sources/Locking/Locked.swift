import Foundation

/// A value behind a lock, shared between threads and tasks.
///
/// Why not `Synchronization.Mutex`: on Linux it waits with raw futex system calls, which the
/// thread sanitizer cannot see, so every use of it is reported as a data race and real races
/// would drown in them. `NSLock` (a pthread mutex) is understood by the sanitizer, and no lock
/// here is held across a suspension point or for long.
///
/// `@unchecked Sendable`: `value` is only read or written while `lock` is held.
public final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) {
        self.value = value
    }

    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
