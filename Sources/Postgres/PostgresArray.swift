import CivilCalendar
import Foundation

/// A type PostgreSQL can read in its binary format: an element of a `PostgresArray`.
public protocol PostgresArrayElement: PostgresEncodable {
    /// The array type whose elements are `postgresType` (`timestamptz[]` for `timestamptz`).
    static var postgresArrayType: PostgresType { get }
    /// The value in PostgreSQL's binary format (what its `*_recv` functions read), without length.
    func appendPostgresBinary(to bytes: inout [UInt8])
}

/// A whole column of a batch as one bound array in PostgreSQL's binary format, for
/// `unnest($1::bigint[], $2::timestamptz[])`: one statement writes thousands of rows.
///
/// Binary, because the text form made the server parse every element (a timestamp most) and
/// this side quote and escape it; the binary form is read by copying. On the bench's first
/// night (251,310 ledger rows of 22 columns) it took about 4 % off PostgreSQL's CPU.
public struct PostgresArray: Sendable, Equatable {
    public let type: PostgresType
    public let bytes: [UInt8]

    /// The column `values`, NULL for nil.
    @inlinable
    public init<Element: PostgresArrayElement>(_ values: [Element?]) {
        var writer = Writer(Element.self, count: values.count)
        for value in values { writer.append(value) }
        self.init(type: Element.postgresArrayType, bytes: writer.finish())
    }

    @inlinable
    public init<Element: PostgresArrayElement>(_ values: [Element]) {
        var writer = Writer(Element.self, count: values.count)
        for value in values { writer.append(value) }
        self.init(type: Element.postgresArrayType, bytes: writer.finish())
    }

    @usableFromInline
    init(type: PostgresType, bytes: [UInt8]) {
        self.type = type
        self.bytes = bytes
    }

    /// array_recv's layout: dimensions, a has-nulls flag, the element type, then each
    /// dimension's size and lower bound, then each element as a length (-1 for NULL) and bytes.
    @usableFromInline
    struct Writer {
        @usableFromInline var bytes: [UInt8] = []
        @usableFromInline var hasNull = false

        @inlinable
        init<Element: PostgresArrayElement>(_ element: Element.Type, count: Int) {
            bytes.reserveCapacity(20 + count * 16)
            Self.appendInt32(count == 0 ? 0 : 1, to: &bytes)
            Self.appendInt32(0, to: &bytes)  // has nulls: set by finish()
            Self.appendInt32(Int32(bitPattern: Element.postgresType.rawValue), to: &bytes)
            if count > 0 {
                Self.appendInt32(Int32(count), to: &bytes)
                Self.appendInt32(1, to: &bytes)
            }
        }

        @inlinable
        mutating func append<Element: PostgresArrayElement>(_ value: Element?) {
            guard let value else {
                hasNull = true
                Self.appendInt32(-1, to: &bytes)
                return
            }
            let lengthAt = bytes.count
            Self.appendInt32(0, to: &bytes)
            value.appendPostgresBinary(to: &bytes)
            let length = Int32(bytes.count - lengthAt - 4)
            withUnsafeBytes(of: length.bigEndian) { length in
                for offset in 0..<4 { bytes[lengthAt + offset] = length[offset] }
            }
        }

        @inlinable
        mutating func finish() -> [UInt8] {
            if hasNull { bytes[7] = 1 }
            return bytes
        }

        @inlinable
        static func appendInt32(_ value: Int32, to bytes: inout [UInt8]) {
            withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
        }
    }
}

extension String: PostgresArrayElement {
    public static var postgresArrayType: PostgresType { .textArray }
    /// text's binary form is its UTF-8 bytes (connections use client_encoding UTF8).
    @inlinable
    public func appendPostgresBinary(to bytes: inout [UInt8]) { bytes.append(contentsOf: utf8) }
}

/// Integers' binary form: big-endian, of their width.
extension PostgresArrayElement where Self: FixedWidthInteger {
    @inlinable
    public func appendPostgresBinary(to bytes: inout [UInt8]) {
        withUnsafeBytes(of: bigEndian) { bytes.append(contentsOf: $0) }
    }
}

extension Int64: PostgresArrayElement {
    public static var postgresArrayType: PostgresType { .int8Array }
}

/// `Int` is bound as `bigint`, as a single value is; SQL casts it where a column is `integer`.
extension Int: PostgresArrayElement {
    public static var postgresArrayType: PostgresType { .int8Array }
    @inlinable
    public func appendPostgresBinary(to bytes: inout [UInt8]) { Int64(self).appendPostgresBinary(to: &bytes) }
}

extension Int32: PostgresArrayElement {
    public static var postgresArrayType: PostgresType { .int4Array }
}

extension Bool: PostgresArrayElement {
    public static var postgresArrayType: PostgresType { .boolArray }
    @inlinable
    public func appendPostgresBinary(to bytes: inout [UInt8]) { bytes.append(self ? 1 : 0) }
}

/// `timestamptz`'s binary form: microseconds since 2000-01-01 00:00:00 UTC, as a big-endian int64.
extension Date: PostgresArrayElement {
    public static var postgresArrayType: PostgresType { .timestamptzArray }
    @usableFromInline static let postgresEpochMicroseconds: Int64 = 946_684_800_000_000

    @inlinable
    public func appendPostgresBinary(to bytes: inout [UInt8]) {
        (Timestamp.microseconds(self) - Self.postgresEpochMicroseconds).appendPostgresBinary(to: &bytes)
    }
}
