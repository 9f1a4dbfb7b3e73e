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
        Timestamp.format(self, .microseconds)
    }

    public func appendPostgresText(to bytes: inout [UInt8]) {
        Timestamp.append(microseconds: Timestamp.microseconds(self), .microseconds, to: &bytes)
    }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> Date {
        guard type == .timestamptz || type == .timestamp else { throw .unexpected(type, for: Date.self) }
        // PostgreSQL's special values, which an app may store (`expires_at = 'infinity'` for a
        // lifetime grant): read as the furthest dates, never an error that stops every run.
        if text == "infinity" { return .distantFuture }
        if text == "-infinity" { return .distantPast }
        guard let micros = Timestamp.parseMicroseconds(text, .spaceSeparator) else {
            throw PostgresDecodingFailure("not a finite ISO timestamp")
        }
        return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
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

    /// Encodes `value` with sorted keys, so equal values give equal text; times as every output
    /// writes them (`Timestamp`, UTC to the millisecond).
    public init(encoding value: some Encodable) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        self.text = String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    public static var postgresType: PostgresType { .jsonb }
    public var postgresText: String { text }

    public static func decode(text: Substring, type: PostgresType) throws(PostgresDecodingFailure) -> PostgresJSON {
        guard type == .jsonb || type == .json else { throw .unexpected(type, for: PostgresJSON.self) }
        return PostgresJSON(text: String(text))
    }

    /// Reads what `init(encoding:)` wrote, and the whole seconds stored before it kept milliseconds.
    public func decoded<T: Decodable>(as type: T.Type) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = Timestamp.parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a UTC time: \(text)")
            }
            return date
        }
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

/// An array in PostgreSQL's text form, elements possibly NULL: for a `[String]` bound to
/// `= ANY($1)`, and for arrays nested in a batch column (each receipt's original ids, one
/// `text[]` literal per element of a binary `PostgresArray`). Batch columns themselves are
/// `PostgresArray`s: the server reads those without parsing.
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
