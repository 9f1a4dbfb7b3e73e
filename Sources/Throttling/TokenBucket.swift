import Locking

/// At most `rate` requests a second on average and `burst` at once, across all tasks, with a
/// pause that holds every caller until a given time: Apple's 429 for an endpoint means the
/// endpoint, not the one request, so no task may send to it before `Retry-After`.
///
/// The generic cell rate algorithm: each caller reserves the next slot (`theoretical` advances one
/// interval a slot) and sleeps until it, so callers are served in order with no polling. A caller
/// that wakes inside a pause set meanwhile reserves again after it.
public final class TokenBucket: Sendable {
    private struct State {
        /// When the bucket would be empty again, had every reserved slot been used.
        var theoretical: ContinuousClock.Instant
        var pausedUntil: ContinuousClock.Instant?
        var pauses = 0
    }

    /// Requests a second.
    public let rate: Double
    private let interval: Duration
    /// How far ahead of the steady pace a caller may go: `burst - 1` intervals.
    private let tolerance: Duration
    private let state: Locked<State>

    public init(rate: Double, burst: Int = 1) {
        self.rate = RequestRate.clamped(rate)
        interval = RequestRate.interval(self.rate)
        tolerance = interval * max(0, burst - 1)
        state = Locked(State(theoretical: ContinuousClock.now))
    }

    /// Waits for this caller's slot, and past any pause.
    public func acquire() async {
        while true {
            let now = ContinuousClock.now
            let turn = state.withLock { state in
                let start = max(now, state.pausedUntil ?? now)
                let turn = max(start, state.theoretical - tolerance)
                state.theoretical = max(state.theoretical, turn) + interval
                return turn
            }
            if turn > now {
                do {
                    try await Task.sleep(until: turn, clock: .continuous)
                } catch {
                    return  // cancelled: the caller sees its cancellation next
                }
            }
            let paused = state.withLock { $0.pausedUntil }
            guard let paused, paused > ContinuousClock.now else { return }
        }
    }

    /// Holds every caller, waiting or to come, until `instant`. A later pause never shortens an
    /// earlier one; each one that lengthens it counts.
    public func pause(until instant: ContinuousClock.Instant) {
        state.withLock { state in
            guard instant > (state.pausedUntil ?? ContinuousClock.now) else { return }
            state.pausedUntil = instant
            state.pauses += 1
        }
    }

    /// Whether a pause holds the bucket now.
    public var isPaused: Bool {
        let now = ContinuousClock.now
        return state.withLock { ($0.pausedUntil ?? now) > now }
    }

    /// Pauses that held the bucket.
    public var pauses: Int { state.withLock { $0.pauses } }
}
