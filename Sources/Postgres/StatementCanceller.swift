import CLibPQ
import Foundation
import Locking

/// Cancels the statement a connection is waiting on (docs/operating.md, "Stopping a statement"):
/// without it a task cancelled, or a process stopped, leaves its statement running on the server
/// until it ends by itself, a lock wait for as long as the lock is held.
///
/// libpq's `PQcancel` opens a connection of its own to the server and waits for it to take the
/// request, so it is called from a thread started for it, never from Swift's cooperative pool
/// nor from the connection's thread (which is the one waiting). A statement is cancelled only if
/// it is still the one that was running when it was asked: a request that comes too late finds
/// the connection idle or running the next statement and does nothing.
///
/// `@unchecked Sendable`: its state is only touched while holding `lock`, on any thread.
final class StatementCanceller: @unchecked Sendable {
    private let lock = NSLock()
    /// libpq's cancel key of the live connection, made when it connects and freed when it goes.
    private var key: OpaquePointer?
    /// The statement running now, by the serial it was given when it was queued.
    private var running: UInt64?
    private var lastSerial: UInt64 = 0

    deinit {
        if let key { PQfreeCancel(key) }
    }

    /// Called on the connection's thread once it has connected.
    func connected(_ connection: OpaquePointer) {
        let fresh = PQgetCancel(connection)
        lock.withLock {
            if let key { PQfreeCancel(key) }
            key = fresh
        }
    }

    /// Called on the connection's thread before its `PGconn` is freed.
    func disconnected() {
        lock.withLock {
            if let key { PQfreeCancel(key) }
            key = nil
        }
    }

    /// A serial for a statement about to be queued.
    func reserve() -> UInt64 {
        lock.withLock {
            lastSerial += 1
            return lastSerial
        }
    }

    /// Marks `serial` as the statement running, for the duration of `body`, on the connection's thread.
    func running<Result>(_ serial: UInt64, _ body: () throws -> Result) rethrows -> Result {
        lock.withLock { running = serial }
        defer { lock.withLock { running = nil } }
        return try body()
    }

    /// The statement running now, if any.
    var current: UInt64? { lock.withLock { running } }

    /// Asks the server to cancel statement `serial` if it is still running. Blocks for a round trip
    /// to the server: call it from a thread of its own. The lock is held throughout, so the
    /// statement cannot be marked finished (and the next one begun) while the request is on its way.
    @discardableResult
    func cancel(_ serial: UInt64) -> Bool {
        lock.withLock {
            guard let key, running == serial else { return false }
            var reason = [CChar](repeating: 0, count: 256)
            return PQcancel(key, &reason, Int32(reason.count)) == 1
        }
    }

    /// Cancels statement `serial` from a thread started for it, if it is still running `grace`
    /// later: a statement still running then is waiting on something, while one about to finish
    /// (a batch's commit) is left to finish.
    func cancel(_ serial: UInt64, after grace: Duration) {
        let thread = Thread { [self] in
            if grace > .zero { Thread.sleep(forTimeInterval: grace.seconds) }
            cancel(serial)
        }
        thread.name = "libpq-cancel"
        thread.start()
    }
}

/// Every open connection's canceller, so that a stop signal can reach the statements of them all.
enum RunningStatements {
    private final class Entry: @unchecked Sendable {
        weak var canceller: StatementCanceller?
        init(_ canceller: StatementCanceller) { self.canceller = canceller }
    }

    private static let entries = Locked<[ObjectIdentifier: Entry]>([:])

    static func register(_ canceller: StatementCanceller) {
        entries.withLock { $0[ObjectIdentifier(canceller)] = Entry(canceller) }
    }

    static func unregister(_ canceller: StatementCanceller) {
        _ = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(canceller)) }
    }

    /// The statements running now, each with its connection's canceller.
    static func now() -> [(canceller: StatementCanceller, serial: UInt64)] {
        let cancellers = entries.withLock { $0.values.compactMap(\.canceller) }
        return cancellers.compactMap { canceller in canceller.current.map { (canceller, $0) } }
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

extension PostgresConnection {
    /// Cancels, on every open connection of this process, the statement running now if it is
    /// still running `grace` later. Blocks this thread for `grace` and the requests' round trips:
    /// call it from a thread of its own (the stop-signal thread), never from a task.
    public static func cancelRunningStatements(after grace: Duration = .zero) -> Int {
        let running = RunningStatements.now()
        guard !running.isEmpty else { return 0 }
        if grace > .zero { Thread.sleep(forTimeInterval: grace.seconds) }
        return running.filter { $0.canceller.cancel($0.serial) }.count
    }
}
