import Locking

/// At most `limit` holders at a time; the others wait in line (first come, first served).
public final class ConcurrencyLimiter: Sendable {
    private struct State {
        var available: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        var head = 0
        var isClosed = false
    }

    private let state: Locked<State>

    public init(limit: Int) {
        state = Locked(State(available: max(1, limit)))
    }

    public func acquire() async {
        await withCheckedContinuation { continuation in
            let acquired = state.withLock { state in
                if state.isClosed { return true }
                if state.available > 0 {
                    state.available -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    public func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.head < state.waiters.count {
                let waiter = state.waiters[state.head]
                state.head += 1
                if state.head > 1024 && state.head * 2 > state.waiters.count {
                    state.waiters.removeFirst(state.head)
                    state.head = 0
                }
                return waiter
            }
            state.available += 1
            return nil
        }
        next?.resume()
    }

    /// Lets every waiter, and every later caller, through at once: for a consumer that ended
    /// early (a failure, a cancellation), so that no producer waits for it forever.
    public func close() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isClosed = true
            defer {
                state.waiters.removeAll()
                state.head = 0
            }
            return Array(state.waiters[state.head...])
        }
        for waiter in waiters { waiter.resume() }
    }

    public func withPermit<Result>(_ body: () async throws -> Result) async rethrows -> Result {
        await acquire()
        defer { release() }
        return try await body()
    }
}

/// Spaces requests at least `1/rate` seconds apart, across all tasks.
public final class RateLimiter: Sendable {
    private let interval: Duration
    private let next: Locked<ContinuousClock.Instant>

    public init(requestsPerSecond: Double) {
        interval = RequestRate.interval(requestsPerSecond)
        next = Locked(ContinuousClock.now)
    }

    /// Waits for this caller's turn.
    public func acquire() async {
        let now = ContinuousClock.now
        let turn = next.withLock { next in
            let turn = max(next, now)
            next = turn + interval
            return turn
        }
        if turn > now { try? await Task.sleep(until: turn, clock: .continuous) }
    }
}
