/// Exponential backoff with full jitter: attempt n waits a uniformly random time in
/// [0, min(maximum, base * 2^(n-1))], so a crowd of retries spreads out instead of returning together.
public struct Backoff: Sendable {
    public var base: Duration
    public var maximum: Duration

    public init(base: Duration = .milliseconds(500), maximum: Duration = .seconds(30)) {
        self.base = base
        self.maximum = maximum
    }

    /// The upper bound of the wait after failed attempt `attempt` (1-based).
    public func ceiling(afterAttempt attempt: Int) -> Duration {
        let factor = 1 << min(max(attempt - 1, 0), 30)
        let grown = base * factor
        return grown > maximum ? maximum : grown
    }

    /// A jittered delay from the system's generator. No generator variable of ours: the thread
    /// sanitizer mistakes a reused async-task frame for a race on one.
    public func delay(afterAttempt attempt: Int) -> Duration {
        let ceiling = ceiling(afterAttempt: attempt)
        let nanoseconds = ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000
        guard nanoseconds > 0 else { return .zero }
        return .nanoseconds(Int64.random(in: 0...nanoseconds))
    }

    public func delay(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let ceiling = ceiling(afterAttempt: attempt)
        let nanoseconds = ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000
        guard nanoseconds > 0 else { return .zero }
        return .nanoseconds(Int64.random(in: 0...nanoseconds, using: &generator))
    }
}
