import CivilCalendar
import Foundation

/// A type that can be read from a column in PostgreSQL's text output format.
public protocol PostgresDecodable: Sendable {
    /// Reads `text`, the column's value of `type`. Throws `PostgresDecodingFailure` with a reason
    /// (never the value itself: it might be personal data).
    static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Self
}

/// Why a value could not be decoded; the row adds the column's name.
public struct PostgresDecodingFailure: Error, Sendable {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }

    static func unexpected(_ type: PostgresType, for swiftType: Any.Type) -> Self {
        PostgresDecodingFailure("a \(type) column cannot be decoded as \(swiftType)")
    }
}

public typealias PostgresCodable = PostgresEncodable & PostgresDecodable

// MARK: - Text

extension String: PostgresCodable {
    public static var postgresType: PostgresType { .text }
    public var postgresText: String { self }

    /// Any column decodes as its text form: that is what PostgreSQL sent.
    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> String {
        String(text)
    }
}

// MARK: - Integers

extension Int: PostgresCodable {
    public static var postgresType: PostgresType { .int8 }
    public var postgresText: String { String(self) }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Int {
        guard type == .int8 || type == .int4 || type == .int2 || type == .oid else {
            throw .unexpected(type, for: Int.self)
        }
        guard let value = Int(text) else { throw PostgresDecodingFailure("not an integer") }
        return value
    }
}

extension Int64: PostgresCodable {
    public static var postgresType: PostgresType { .int8 }
    public var postgresText: String { String(self) }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Int64 {
        Int64(try Int.decode(text: text, type: type))
    }
}

extension Int32: PostgresCodable {
    public static var postgresType: PostgresType { .int4 }
    public var postgresText: String { String(self) }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Int32 {
        let value = try Int.decode(text: text, type: type)
        guard let narrow = Int32(exactly: value) else { throw PostgresDecodingFailure("out of range for Int32") }
        return narrow
    }
}

// MARK: - Bool

extension Bool: PostgresCodable {
    public static var postgresType: PostgresType { .bool }
    public var postgresText: String { self ? "t" : "f" }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Bool {
        guard type == .bool else { throw .unexpected(type, for: Bool.self) }
        switch text {
        case "t": return true
        case "f": return false
        default: throw PostgresDecodingFailure("not a boolean")
        }
    }
}

// MARK: - Numbers with fractions

extension Double: PostgresCodable {
    public static var postgresType: PostgresType { .float8 }
    public var postgresText: String { "\(self)" }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Double {
        guard [.float8, .float4, .numeric, .int8, .int4, .int2].contains(type) else {
            throw .unexpected(type, for: Double.self)
        }
        guard let value = Double(text) else { throw PostgresDecodingFailure("not a number") }
        return value
    }
}

/// `numeric` as `Decimal`, exact: prices are money.
extension Decimal: PostgresCodable {
    public static var postgresType: PostgresType { .numeric }
    public var postgresText: String { "\(self)" }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Decimal {
        guard [.numeric, .int8, .int4, .int2].contains(type) else { throw .unexpected(type, for: Decimal.self) }
        guard let value = Decimal(string: String(text), locale: Locale(identifier: "en_US_POSIX")) else {
            throw PostgresDecodingFailure("not a decimal number")
        }
        return value
    }
}

// MARK: - Times

/// `timestamptz`: connections run with `TimeZone=UTC` and `DateStyle=ISO`, so values come as
/// `2026-11-22 07:12:00.123456+00`. Microsecond precision both ways.
extension Date: PostgresCodable {
    public static var postgresType: PostgresType { .timestamptz }

    public var postgresText: String {
        let micros = Int64((timeIntervalSince1970 * 1_000_000).rounded())
        return PostgresTimestamp.format(microsecondsSince1970: micros)
    }

    public func appendPostgresText(to bytes: inout [UInt8]) {
        PostgresTimestamp.append(microsecondsSince1970: Int64((timeIntervalSince1970 * 1_000_000).rounded()), to: &bytes)
    }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Date {
        guard type == .timestamptz || type == .timestamp else { throw .unexpected(type, for: Date.self) }
        guard let micros = PostgresTimestamp.parse(text) else {
            throw PostgresDecodingFailure("not a finite ISO timestamp")
        }
        return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
    }
}

/// PostgreSQL's timestamp text with microseconds, both ways.
public enum PostgresTimestamp {
    /// `2026-11-22T07:12:00.123456Z`.
    public static func format(microsecondsSince1970 micros: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        append(microsecondsSince1970: micros, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `format`, appended to `bytes`: written digit by digit, since batches write hundreds of
    /// thousands of timestamps, with no `String` in between for the years 1-9999.
    public static func append(microsecondsSince1970 micros: Int64, to bytes: inout [UInt8]) {
        let (days, microOfDay) = micros.floorDividedAndModulo(by: 86_400_000_000)
        let (year, month, day) = CivilCalendar.date(days: days)
        let seconds = microOfDay / 1_000_000
        let fraction = microOfDay % 1_000_000
        guard year > 0 && year <= 9999 else {
            // Year 0 is 1 BC to PostgreSQL, which counts no year zero.
            var timeBytes = [UInt8](repeating: 0, count: 15)
            putTime(seconds, fraction, into: &timeBytes, at: 0)
            let time = String(decoding: timeBytes, as: UTF8.self)
            func pad(_ value: Int64, _ width: Int) -> String {
                let digits = String(value)
                return String(repeating: "0", count: max(0, width - digits.count)) + digits
            }
            let text = year <= 0 ? "\(pad(1 - year, 4))-\(pad(month, 2))-\(pad(day, 2)) \(time)+00 BC"
                : "\(year)-\(pad(month, 2))-\(pad(day, 2))T\(time)Z"
            bytes.append(contentsOf: text.utf8)
            return
        }
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: 27))
        CivilCalendar.putDigits(year, width: 4, into: &bytes, at: start)
        bytes[start + 4] = UInt8(ascii: "-")
        CivilCalendar.putDigits(month, width: 2, into: &bytes, at: start + 5)
        bytes[start + 7] = UInt8(ascii: "-")
        CivilCalendar.putDigits(day, width: 2, into: &bytes, at: start + 8)
        bytes[start + 10] = UInt8(ascii: "T")
        putTime(seconds, fraction, into: &bytes, at: start + 11)
        bytes[start + 26] = UInt8(ascii: "Z")
    }

    /// `HH:MM:SS.ffffff` into `bytes` at `start`.
    private static func putTime(_ seconds: Int64, _ fraction: Int64, into bytes: inout [UInt8], at start: Int) {
        CivilCalendar.putDigits(seconds / 3600, width: 2, into: &bytes, at: start)
        bytes[start + 2] = UInt8(ascii: ":")
        CivilCalendar.putDigits(seconds / 60 % 60, width: 2, into: &bytes, at: start + 3)
        bytes[start + 5] = UInt8(ascii: ":")
        CivilCalendar.putDigits(seconds % 60, width: 2, into: &bytes, at: start + 6)
        bytes[start + 8] = UInt8(ascii: ".")
        CivilCalendar.putDigits(fraction, width: 6, into: &bytes, at: start + 9)
    }

    /// Parses `YYYY-MM-DD[ T]HH:MM:SS[.ffffff][+HH[:MM[:SS]]|Z]`; nil for anything else (including infinity and BC).
    public static func parse(_ text: Substring) -> Int64? {
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
        func expect(_ characters: Set<UInt8>) -> Bool {
            guard let byte = bytes.first, characters.contains(byte) else { return false }
            bytes.removeFirst()
            return true
        }
        guard let year = number(4), expect([45]), let month = number(2), expect([45]), let day = number(2),
              expect([32, 84]), let hour = number(2), expect([58]), let minute = number(2), expect([58]),
              let second = number(2)
        else { return nil }
        var micros: Int64 = 0
        if expect([46]) {
            var scale: Int64 = 100_000
            while let byte = bytes.first, byte >= 48 && byte <= 57 {
                bytes.removeFirst()
                micros += Int64(byte - 48) * scale
                scale /= 10
            }
        }
        var offsetSeconds: Int64 = 0
        if expect([90]) {
            offsetSeconds = 0
        } else if let sign = bytes.first, sign == 43 || sign == 45 {
            bytes.removeFirst()
            guard let hours = number(2) else { return nil }
            var total = hours * 3600
            if expect([58]) { guard let minutes = number(2) else { return nil }; total += minutes * 60 }
            if expect([58]) { guard let seconds = number(2) else { return nil }; total += seconds }
            offsetSeconds = sign == 45 ? -total : total
        }
        guard bytes.isEmpty, (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        let days = CivilCalendar.days(year: year, month: month, day: day)
        let secondsOfDay = hour * 3600 + minute * 60 + second - offsetSeconds
        return (days * 86_400 + secondsOfDay) * 1_000_000 + micros
    }

}

extension Int64 {
    fileprivate func floorDividedAndModulo(by divisor: Int64) -> (Int64, Int64) {
        let quotient = self >= 0 ? self / divisor : (self - divisor + 1) / divisor
        return (quotient, self - quotient * divisor)
    }
}

/// `interval`, kept as PostgreSQL keeps it: months, days and microseconds do not convert into
/// each other (a month is not 30 days), so a catalog's `1 mon` stays one calendar month.
public struct PostgresInterval: PostgresCodable, Hashable {
    public var months: Int32
    public var days: Int32
    public var microseconds: Int64

    public init(months: Int32 = 0, days: Int32 = 0, microseconds: Int64 = 0) {
        self.months = months
        self.days = days
        self.microseconds = microseconds
    }

    public static var postgresType: PostgresType { .interval }

    /// ISO 8601 with designators, which PostgreSQL reads whatever its `IntervalStyle`.
    public var postgresText: String {
        let sign = microseconds < 0 ? "-" : ""
        let magnitude = microseconds.magnitude
        let seconds = magnitude / 1_000_000
        let fraction = magnitude % 1_000_000
        var fractionText = ""
        if fraction != 0 {
            fractionText = "." + String(String(fraction + 1_000_000).dropFirst())
        }
        return "P\(months)M\(days)DT\(sign)\(seconds)\(fractionText)S"
    }

    /// Connections run with `IntervalStyle=iso_8601`: `P1Y2M3DT4H5M6.5S`, `PT0S`, `P-1M`.
    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> PostgresInterval {
        guard type == .interval else { throw .unexpected(type, for: PostgresInterval.self) }
        var interval = PostgresInterval()
        var rest = text
        guard rest.first == "P" else { throw PostgresDecodingFailure("not an ISO 8601 interval") }
        rest = rest.dropFirst()
        var inTime = false
        while !rest.isEmpty {
            if rest.first == "T" {
                inTime = true
                rest = rest.dropFirst()
                continue
            }
            let numberEnd = rest.firstIndex { !("0"..."9").contains($0) && $0 != "-" && $0 != "." } ?? rest.endIndex
            guard numberEnd != rest.endIndex, numberEnd != rest.startIndex else {
                throw PostgresDecodingFailure("not an ISO 8601 interval")
            }
            let number = rest[..<numberEnd]
            let unit = rest[numberEnd]
            rest = rest[rest.index(after: numberEnd)...]
            if inTime {
                guard let value = Double(number) else { throw PostgresDecodingFailure("not an ISO 8601 interval") }
                let scale: Double = switch unit {
                case "H": 3_600_000_000
                case "M": 60_000_000
                case "S": 1_000_000
                default: throw PostgresDecodingFailure("not an ISO 8601 interval")
                }
                interval.microseconds += Int64((value * scale).rounded())
            } else {
                guard let value = Int32(number) else { throw PostgresDecodingFailure("not an ISO 8601 interval") }
                switch unit {
                case "Y": interval.months += value * 12
                case "M": interval.months += value
                case "W": interval.days += value * 7
                case "D": interval.days += value
                default: throw PostgresDecodingFailure("not an ISO 8601 interval")
                }
            }
        }
        return interval
    }
}

// MARK: - JSON and bytes

/// A `jsonb` value as its JSON text. Binding plain text to a `jsonb` column would fail: there is
/// no assignment cast from `text`, so JSON travels in this wrapper.
public struct PostgresJSON: PostgresCodable, Hashable {
    public var text: String
    public init(text: String) { self.text = text }

    /// Encodes `value` with sorted keys, so equal values give equal text.
    public init(encoding value: some Encodable) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        self.text = String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    public static var postgresType: PostgresType { .jsonb }
    public var postgresText: String { text }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> PostgresJSON {
        guard type == .jsonb || type == .json else { throw .unexpected(type, for: PostgresJSON.self) }
        return PostgresJSON(text: String(text))
    }

    public func decoded<T: Decodable>(as type: T.Type) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(T.self, from: Data(text.utf8))
    }
}

extension Data: PostgresCodable {
    public static var postgresType: PostgresType { .bytea }
    public var postgresText: String {
        "\\x" + map { byte in String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }
            .joined()
    }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Data {
        guard type == .bytea else { throw .unexpected(type, for: Data.self) }
        guard text.hasPrefix("\\x"), text.count % 2 == 0 else { throw PostgresDecodingFailure("not hex bytea") }
        var data = Data(capacity: (text.count - 2) / 2)
        var index = text.index(text.startIndex, offsetBy: 2)
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { throw PostgresDecodingFailure("not hex bytea") }
            data.append(byte)
            index = next
        }
        return data
    }
}

// MARK: - Arrays, for `= ANY($1)` and `unnest($1, $2, ...)` with one bind per column

extension Array: PostgresEncodable where Element == String {
    public static var postgresType: PostgresType { .textArray }
    public var postgresText: String { PostgresTextArray(self).postgresText }
}

/// A `text[]` whose elements may be NULL: a whole column of a batch in one bind, cast in SQL
/// (`unnest($1::bigint[], $2::timestamptz[])`) so one statement writes many rows. The array's
/// text is written once, as bytes: a batch binds tens of thousands of values through here.
public struct PostgresTextArray: PostgresEncodable {
    public let postgresText: String

    @usableFromInline
    init(text: String) {
        postgresText = text
    }

    public init(_ elements: [String?]) {
        self.init(values: elements)
    }

    /// The text form of each value (`Date`, `Int`, `Bool`, ...), NULL for nil. Inlinable, so it
    /// is specialized for each column type where a batch is built.
    @inlinable
    public init<Value: PostgresEncodable>(_ values: [Value?]) {
        self.init(values: values)
    }

    @inlinable
    init<Value: PostgresEncodable>(values: [Value?]) {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(values.count * 16 + 2)
        var element: [UInt8] = []
        for index in values.indices {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            let value = values[index]
            guard let value else {
                bytes.append(contentsOf: "NULL".utf8)
                continue
            }
            element.removeAll(keepingCapacity: true)
            value.appendPostgresText(to: &element)
            bytes.append(UInt8(ascii: "\""))
            for byte in element {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { bytes.append(UInt8(ascii: "\\")) }
                bytes.append(byte)
            }
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: "}"))
        self.init(text: String(decoding: bytes, as: UTF8.self))
    }

    public static var postgresType: PostgresType { .textArray }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Wrapped? {
        try Wrapped.decode(text: text, type: type)
    }
}
