import Foundation
import Locking

/// A thread of its own that runs blocking libpq calls one at a time, in submission order,
/// so they never occupy Swift's cooperative pool.
///
/// `@unchecked Sendable`: `jobs` and `isStopping` are only touched while holding `condition`.
final class BlockingThread: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [() -> Void] = []
    private var isStopping = false

    init(name: String) {
        let thread = Thread { [self] in
            Thread.current.name = name  // set inside: a name set before start() does not stick on Linux
            self.runLoop()
        }
        thread.start()
    }

    /// Runs `body` on the thread and returns its result to the awaiting task.
    ///
    /// The result travels through a lock as well as the continuation: when the thread resumes the
    /// continuation before the awaiting task has suspended (a quick statement), the thread
    /// sanitizer sees no order between the thread's writes and the task's reads and reports a
    /// race that is not one (seen in CI on rows of an `INSERT ... RETURNING`); the lock's
    /// release and acquire give it that order, for about a hundred nanoseconds a statement.
    func run<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
        let handOver = Locked<Swift.Result<Result, any Error>?>(nil)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let accepted = enqueue {
                let result = Swift.Result { try body() }
                handOver.withLock { $0 = result }
                continuation.resume()
            }
            if !accepted {
                continuation.resume(throwing: PostgresError(code: .connectionClosed, message: "the connection was closed"))
            }
        }
        return try handOver.withLock { $0! }.get()
    }

    /// Runs `body` on the thread without waiting (for cleanup from `deinit`), then lets the thread end.
    func finish(_ body: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(body)
        isStopping = true
        condition.signal()
        condition.unlock()
    }

    private func enqueue(_ job: @escaping () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !isStopping else { return false }
        jobs.append(job)
        condition.signal()
        return true
    }

    private func runLoop() {
        while true {
            condition.lock()
            while jobs.isEmpty && !isStopping { condition.wait() }
            if jobs.isEmpty {  // stopping, and nothing left to run
                condition.unlock()
                return
            }
            let batch = jobs
            jobs.removeAll()
            condition.unlock()
            for job in batch { job() }
        }
    }
}
