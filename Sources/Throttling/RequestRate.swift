/// Requests a second, as the command line and Apple's quota table give them: within `range`.
///
/// A rate reaches the code as a `Double` (`--rate-limit 0.5`), and it turns into an interval and
/// a burst, both integers; converting `1e300` or NaN to an integer traps. The command line refuses
/// a rate outside the range; the throttles clamp into it as well, so that no caller can trap them.
public enum RequestRate {
    /// One request in about 17 minutes up to 100,000 a second: far past what Apple allows on any
    /// endpoint, and an interval of 10 µs, still a whole number of nanoseconds.
    public static let range: ClosedRange<Double> = 0.001...100_000

    /// `rate` within `range`; NaN counts as the slowest rate.
    public static func clamped(_ rate: Double) -> Double {
        rate.isNaN ? range.lowerBound : min(max(rate, range.lowerBound), range.upperBound)
    }

    /// The time between two requests at `rate` (clamped).
    public static func interval(_ rate: Double) -> Duration {
        .nanoseconds(Int64((1_000_000_000 / clamped(rate)).rounded()))
    }
}
