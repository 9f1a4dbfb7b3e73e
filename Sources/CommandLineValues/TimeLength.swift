import CivilCalendar
import Foundation

/// A length of time on the command line: `20h`, `30m`, `90s`, `2d`, `500ms`, or plain seconds.
public struct TimeLength: Sendable, Equatable {
    public var seconds: TimeInterval

    public init(seconds: TimeInterval) { self.seconds = seconds }

    /// A default the program states as a `Duration` (`RunOptions.defaults`), as `--help` shows it.
    public init(_ duration: Duration) {
        seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Ten years: longer is no time a nightly job means, and past it `Duration` arithmetic could trap.
    public static let maximumSeconds: TimeInterval = 3650 * 86_400

    public init?(argument: String) {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]
        var scale = 1.0
        var number = Substring(argument)
        if let (suffix, unit) = units.first(where: { argument.hasSuffix($0.0) }) {
            number = number.dropLast(suffix.count)
            scale = unit
        }
        // "inf", "nan" and 1e300 parse as Doubles: refused here, never a trap later.
        guard let value = Double(number), value.isFinite, value >= 0, value * scale <= Self.maximumSeconds else { return nil }
        seconds = value * scale
    }

    public var duration: Duration { .milliseconds(Int64(seconds * 1000)) }

    /// `--help` shows a default as the user would type it (`1h`, `20h`, `7d`), not as a struct.
    public var defaultValueDescription: String { Self.text(seconds: seconds) }

    /// The largest unit that states the length exactly; `1.5s`, `250ms` where none does.
    public static func text(seconds: TimeInterval) -> String {
        if seconds == 0 { return "0s" }
        for (suffix, unit) in [("d", 86_400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)]
        where seconds >= unit && seconds.truncatingRemainder(dividingBy: unit) == 0 {
            return "\(Int(seconds / unit))\(suffix)"
        }
        let milliseconds = seconds * 1000
        if milliseconds == milliseconds.rounded() { return "\(Int(milliseconds))ms" }
        return "\(seconds)s"
    }
}

/// A date or time on the command line (`--since`, `--from`, `--as-of`): ISO 8601, or a day alone
/// (`2026-11-01`, midnight UTC). Years 0001 to 9999 only, as `Timestamp` reads them.
public enum CommandLineTime {
    public static func parse(_ text: String) -> Date? {
        Timestamp.parse(text.utf8.count == 10 ? text + "T00:00:00Z" : text)
    }
}
