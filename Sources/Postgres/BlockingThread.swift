import Foundation

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
    func run<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            let accepted = enqueue {
                continuation.resume(with: Swift.Result { try body() })
            }
            if !accepted {
                continuation.resume(throwing: PostgresError(code: .connectionClosed, message: "the connection was closed"))
            }
        }
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
