import Foundation

/// Every timestamp the program writes or reads as text, in one place: ISO 8601 in UTC with a
/// `Z`, milliseconds in what people and finance read (reports, CSVs, logs), microseconds in what
/// PostgreSQL reads back exactly (binds, stored JSON). By hand, byte by byte: batches write
/// hundreds of thousands of them, and a `DateFormatter` is slow and not safe to share.
public enum Timestamp {
    /// Digits after the seconds' point.
    public enum Precision: Int, Sendable {
        /// `2026-11-02T10:00:00.000Z`: reports, CSVs, JSON for tools, logs.
        case milliseconds = 3
        /// `2026-11-02T10:00:00.000000Z`: PostgreSQL's own precision, for values it reads back.
        case microseconds = 6
    }

    /// What a reader accepts beyond strict ISO 8601 (`YYYY-MM-DDThh:mm:ss[.f]` and a zone).
    public struct Leniency: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// A space between date and time, as PostgreSQL and Apple's display dates write it.
        public static let spaceSeparator = Leniency(rawValue: 1)
        /// No zone at all means UTC (Apple's display dates, once their zone name is checked).
        public static let missingZoneIsUTC = Leniency(rawValue: 2)
    }

    /// Microseconds since 1970 of a date, rounded; saturated at about ±146,000 years (NaN is 0), so
    /// that no date, however it was made, traps on its way to text or to PostgreSQL.
    public static func microseconds(_ date: Date) -> Int64 {
        saturating(date.timeIntervalSince1970 * 1_000_000)
    }

    /// The furthest a converted count may lie from 1970 (2^62): far past any real date, and far
    /// enough from `Int64`'s ends that rounding and calendar arithmetic on it cannot overflow.
    public static let saturationLimit: Int64 = 1 << 62

    /// `value` rounded to a whole number within `±saturationLimit`; NaN is 0. Conversions from
    /// `Double` to an integer trap when out of range: every one in this program goes through here.
    public static func saturating(_ value: Double) -> Int64 {
        guard !value.isNaN else { return 0 }
        let limit = Double(saturationLimit)
        return Int64(min(max(value.rounded(), -limit), limit))
    }

    public static func date(microseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(microseconds) / 1_000_000)
    }

    public static func format(_ date: Date, _ precision: Precision = .milliseconds) -> String {
        format(microseconds: microseconds(date), precision)
    }

    public static func format(microseconds: Int64, _ precision: Precision) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        append(microseconds: microseconds, precision, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `format`, appended to `bytes` with no `String` in between (years 1 to 9999). Other years,
    /// which no column of this program holds, are written as PostgreSQL reads them (`BC`).
    public static func append(microseconds: Int64, _ precision: Precision, to bytes: inout [UInt8]) {
        let microseconds = min(max(microseconds, -saturationLimit), saturationLimit)
        let digits = precision.rawValue
        let unit: Int64 = digits == 3 ? 1_000 : 1
        // Milliseconds are rounded, as people expect, not truncated.
        let scaled = digits == 3 ? floorDivision(microseconds + 500, 1_000).quotient * 1_000 : microseconds
        let (days, microOfDay) = floorDivision(scaled, 86_400_000_000)
        let (year, month, day) = CivilCalendar.date(days: days)
        let seconds = microOfDay / 1_000_000
        let fraction = (microOfDay % 1_000_000) / unit
        let start = bytes.count
        let timeLength = 9 + digits  // hh:mm:ss.f…
        guard year > 0 && year <= 9999 else {
            var time = [UInt8](repeating: 0, count: timeLength)
            putTime(seconds, fraction, digits: digits, into: &time, at: 0)
            func pad(_ value: Int64, _ width: Int) -> String {
                let text = String(value)
                return String(repeating: "0", count: max(0, width - text.count)) + text
            }
            let clock = String(decoding: time, as: UTF8.self)
            // Year 0 is 1 BC to PostgreSQL, which counts no year zero.
            let text = year <= 0 ? "\(pad(1 - year, 4))-\(pad(month, 2))-\(pad(day, 2)) \(clock)+00 BC"
                : "\(year)-\(pad(month, 2))-\(pad(day, 2))T\(clock)Z"
            bytes.append(contentsOf: text.utf8)
            return
        }
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: 11 + timeLength + 1))
        CivilCalendar.putDigits(year, width: 4, into: &bytes, at: start)
        bytes[start + 4] = UInt8(ascii: "-")
        CivilCalendar.putDigits(month, width: 2, into: &bytes, at: start + 5)
        bytes[start + 7] = UInt8(ascii: "-")
        CivilCalendar.putDigits(day, width: 2, into: &bytes, at: start + 8)
        bytes[start + 10] = UInt8(ascii: "T")
        putTime(seconds, fraction, digits: digits, into: &bytes, at: start + 11)
        bytes[start + 11 + timeLength] = UInt8(ascii: "Z")
    }

    /// `hh:mm:ss.f…` into `bytes` at `start`.
    private static func putTime(_ seconds: Int64, _ fraction: Int64, digits: Int, into bytes: inout [UInt8], at start: Int) {
        CivilCalendar.putDigits(seconds / 3600, width: 2, into: &bytes, at: start)
        bytes[start + 2] = UInt8(ascii: ":")
        CivilCalendar.putDigits(seconds / 60 % 60, width: 2, into: &bytes, at: start + 3)
        bytes[start + 5] = UInt8(ascii: ":")
        CivilCalendar.putDigits(seconds % 60, width: 2, into: &bytes, at: start + 6)
        bytes[start + 8] = UInt8(ascii: ".")
        CivilCalendar.putDigits(fraction, width: digits, into: &bytes, at: start + 9)
    }

    public static func parse(_ text: String, _ leniency: Leniency = []) -> Date? {
        parseMicroseconds(text[...], leniency).map(date(microseconds:))
    }

    /// Microseconds since 1970 of `YYYY-MM-DDThh:mm:ss[.f…]` followed by `Z` or an offset
    /// (`±hh`, `±hhmm`, `±hh:mm`, `±hh:mm:ss`); nil for anything else, out-of-range fields,
    /// trailing text, infinity or BC included.
    public static func parseMicroseconds(_ text: Substring, _ leniency: Leniency = []) -> Int64? {
        var bytes = text.utf8[...]
        func number(_ width: Int) -> Int64? {
            guard bytes.count >= width else { return nil }
            var value: Int64 = 0
            for _ in 0..<width {
                let byte = bytes.removeFirst()
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        func expect(_ byte: UInt8) -> Bool {
            guard bytes.first == byte else { return false }
            bytes.removeFirst()
            return true
        }
        guard let year = number(4), expect(UInt8(ascii: "-")), let month = number(2), expect(UInt8(ascii: "-")),
              let day = number(2),
              expect(UInt8(ascii: "T")) || (leniency.contains(.spaceSeparator) && expect(UInt8(ascii: " "))),
              let hour = number(2), expect(UInt8(ascii: ":")), let minute = number(2), expect(UInt8(ascii: ":")),
              let second = number(2)
        else { return nil }
        var micros: Int64 = 0
        if expect(UInt8(ascii: ".")) {
            var scale: Int64 = 100_000
            var digits = 0
            while let byte = bytes.first, byte >= 48 && byte <= 57 {
                bytes.removeFirst()
                micros += Int64(byte - 48) * scale
                scale /= 10
                digits += 1
            }
            guard digits > 0 else { return nil }
        }
        var offsetSeconds: Int64 = 0
        if expect(UInt8(ascii: "Z")) {
            offsetSeconds = 0
        } else if let sign = bytes.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
            bytes.removeFirst()
            guard let hours = number(2) else { return nil }
            var total = hours * 3600
            let colon = expect(UInt8(ascii: ":"))
            if colon || bytes.first.map({ $0 >= 48 && $0 <= 57 }) == true {
                guard let minutes = number(2) else { return nil }
                total += minutes * 60
                if colon && expect(UInt8(ascii: ":")) {
                    guard let seconds = number(2) else { return nil }
                    total += seconds
                }
            }
            offsetSeconds = sign == UInt8(ascii: "-") ? -total : total
        } else if !leniency.contains(.missingZoneIsUTC) {
            return nil
        }
        guard bytes.isEmpty, (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        let days = CivilCalendar.days(year: year, month: month, day: day)
        let secondsOfDay = hour * 3600 + minute * 60 + second - offsetSeconds
        return (days * 86_400 + secondsOfDay) * 1_000_000 + micros
    }

    /// Floor division and its non-negative remainder (Swift's `/` rounds towards zero).
    public static func floorDivision(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let quotient = value >= 0 ? value / divisor : (value - divisor + 1) / divisor
        return (quotient, value - quotient * divisor)
    }
}

extension Timestamp {
    /// `2026-11-02`: the UTC day, as reasons and reports name it.
    public static func day(_ date: Date) -> String {
        String(format(date).prefix(10))
    }
}

extension Duration {
    /// In seconds, for `Date` arithmetic and for Foundation's APIs.
    public var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// In whole milliseconds (the rest dropped), for arithmetic on millisecond clocks. Durations
    /// here are made by this program (ten years at most), never read from outside.
    public var wholeMilliseconds: Int64 {
        components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000
    }
}

extension Date {
    public func adding(_ duration: Duration) -> Date {
        addingTimeInterval(duration.timeInterval)
    }
}
