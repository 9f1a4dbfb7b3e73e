import CivilCalendar
import Foundation

/// One value of an answer, kept as its bytes until read: Apple's JSON as it really comes.
/// Numbers come as strings or numbers, flags as "true"/"false", "1"/"0", true/false or 1/0, ids
/// as strings or numbers. Every reader here returns nil for JSON null, and throws only for a value
/// no spelling can explain. It points into the bytes of `AppleJSONReader.read`, and the compiler
/// keeps it there: `~Escapable`, it cannot outlive the read.
struct AppleJSONValue: ~Escapable {
    enum Kind { case object, array, string, number, bool, null }

    let kind: Kind
    /// The value's text as it stands in the document (a string with its quotes).
    let bytes: UnsafeBufferPointer<UInt8>
    /// A string holding backslash escapes, which must be decoded to be read.
    let escaped: Bool
    /// The name of the member it is the value of (of the array, for an element), as written:
    /// an error names it.
    let member: UnsafeBufferPointer<UInt8>
    private let lifetime: DocumentLifetime

    @_lifetime(copy lifetime)
    init(kind: Kind, bytes: UnsafeBufferPointer<UInt8>, escaped: Bool, member: UnsafeBufferPointer<UInt8>, lifetime: DocumentLifetime) {
        self.kind = kind
        self.bytes = bytes
        self.escaped = escaped
        self.member = member
        self.lifetime = lifetime
    }

    /// The field, for an error: the member's name as written, shown escaped (it is outside text).
    var field: String {
        member.isEmpty ? "the value" : String(decoding: member.prefix(64), as: UTF8.self).unicodeScalars
            .map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined()
    }

    /// A format error of this value: `field: what`.
    func error(_ what: String) -> AppleJSONError {
        AppleJSONError(description: "\(field): \(what)")
    }

    /// A string, or a number written as its decimal text (ids such as `transaction_id`).
    func string() throws -> String? {
        switch kind {
        case .null: return nil
        case .string:
            let content = UnsafeBufferPointer(rebasing: bytes[1..<(bytes.count - 1)])
            return escaped ? try Self.unescape(content) : String(decoding: content, as: UTF8.self)
        case .number:
            let text = String(decoding: bytes, as: UTF8.self)
            if let number = Int64(text) { return String(number) }
            if let number = Double(text), number.rounded() == number, abs(number) < 1e18 { return String(Int64(number)) }
            throw error("expected a string or a whole number, found \(text.prefix(40))")
        case .bool: return bytes[0] == UInt8(ascii: "t") ? "true" : "false"
        case .object, .array: throw error("expected a string or a number, found \(kind)")
        }
    }

    /// An integer written as a number or as decimal text; empty text counts as missing.
    func int64() throws -> Int64? {
        if let number = fastInt64() { return number }
        guard let text = try string()?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let value = Int64(text) { return value }
        if let value = Double(text), value.rounded() == value, abs(value) < 9e18 { return Int64(value) }
        throw error("expected an integer")
    }

    /// A count or a code (quantity, cancellation_reason, status): Apple's are small, and one past
    /// `Int32` is a forgery that sums and comparisons further in must never see.
    func int(_ field: String) throws -> Int? {
        guard let value = try int64() else { return nil }
        guard let small = Int32(exactly: value) else { throw AppleJSONError.outOfRange(field, "\(value) is out of range for a count or a code") }
        return Int(small)
    }

    /// A flag in any of Apple's spellings: true/false, "true"/"false", 1/0, "1"/"0".
    func bool() throws -> Bool? {
        switch kind {
        case .null: return nil
        case .bool: return bytes[0] == UInt8(ascii: "t")
        case .number:
            switch fastInt64() {
            case 1: return true
            case 0: return false
            default: break
            }
        case .string:
            // The usual spellings, compared as bytes; anything else goes the long way.
            if !escaped {
                switch bytes.count {
                case 2: return nil
                case 3 where bytes[1] == UInt8(ascii: "1"): return true
                case 3 where bytes[1] == UInt8(ascii: "0"): return false
                case 6 where bytes.elementsEqual("\"true\"".utf8): return true
                case 7 where bytes.elementsEqual("\"false\"".utf8): return false
                default: break
                }
            }
            switch try string()?.trimmingCharacters(in: .whitespaces).lowercased() {
            case "true", "1", "yes": return true
            case "false", "0", "no": return false
            case "": return nil
            default: break
            }
        case .object, .array: break
        }
        throw error("expected a flag (true/false or 1/0)")
    }

    /// A time from `<name>_ms` (milliseconds since 1970, string or number). When Apple left out
    /// the `_ms` field, the display field `<name>` is read instead if it holds milliseconds or
    /// `yyyy-MM-dd HH:mm:ss Etc/GMT` (legacy and hand-made answers do this).
    /// A time outside `Date.appleMilliseconds` is an error naming the field, for this answer only.
    static func date(_ name: String, milliseconds: borrowing AppleJSONValue?, display: borrowing AppleJSONValue?) throws -> Date? {
        if let milliseconds = try milliseconds?.int64() {
            return try Date(appleMilliseconds: milliseconds, field: "\(name)_ms")
        }
        guard let display = try? display?.string(), !display.isEmpty else { return nil }
        if let milliseconds = Int64(display) { return try Date(appleMilliseconds: milliseconds, field: name) }
        guard let date = AppleDisplayDate.parse(display) else { return nil }
        return try Date(appleMilliseconds: date.milliseconds, field: name)
    }

    /// Plain decimal digits (the usual `_ms` and id spellings) read straight from the bytes.
    private func fastInt64() -> Int64? {
        var start = 0
        var end = bytes.count
        if kind == .string {
            guard !escaped else { return nil }
            start = 1
            end -= 1
        } else if kind != .number {
            return nil
        }
        var negative = false
        if start < end, bytes[start] == UInt8(ascii: "-") {
            negative = true
            start += 1
        }
        guard end > start, end - start <= 18 else { return nil }
        var value: Int64 = 0
        for index in start..<end {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            value = value * 10 + Int64(digit)
        }
        return negative ? -value : value
    }

    /// Decodes a string's escapes (checked by the reader already).
    static func unescape(_ content: UnsafeBufferPointer<UInt8>) throws -> String {
        var scalars = String.UnicodeScalarView()
        var utf8: [UInt8] = []
        var index = 0
        func flush() {
            if !utf8.isEmpty {
                scalars.append(contentsOf: String(decoding: utf8, as: UTF8.self).unicodeScalars)
                utf8.removeAll(keepingCapacity: true)
            }
        }
        func hex4(_ at: Int) throws -> UInt32 {
            guard at + 4 <= content.count else { throw AppleJSONError(description: "not valid JSON: a bad \\u escape") }
            var value: UInt32 = 0
            for offset in 0..<4 {
                guard let digit = hexValue(content[at + offset]) else {
                    throw AppleJSONError(description: "not valid JSON: a bad \\u escape")
                }
                value = value << 4 | UInt32(digit)
            }
            return value
        }
        while index < content.count {
            let byte = content[index]
            guard byte == UInt8(ascii: "\\"), index + 1 < content.count else {
                utf8.append(byte)
                index += 1
                continue
            }
            flush()
            let escape = content[index + 1]
            index += 2
            switch escape {
            case UInt8(ascii: "b"): scalars.append("\u{08}")
            case UInt8(ascii: "f"): scalars.append("\u{0C}")
            case UInt8(ascii: "n"): scalars.append("\n")
            case UInt8(ascii: "r"): scalars.append("\r")
            case UInt8(ascii: "t"): scalars.append("\t")
            case UInt8(ascii: "u"):
                var code = try hex4(index)
                index += 4
                if (0xD800..<0xDC00).contains(code) {
                    // A high surrogate must be followed by an escaped low one.
                    guard index + 6 <= content.count, content[index] == UInt8(ascii: "\\"), content[index + 1] == UInt8(ascii: "u")
                    else { throw AppleJSONError(description: "not valid JSON: a lone surrogate in a \\u escape") }
                    let low = try hex4(index + 2)
                    guard (0xDC00..<0xE000).contains(low) else {
                        throw AppleJSONError(description: "not valid JSON: a lone surrogate in a \\u escape")
                    }
                    index += 6
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let scalar = Unicode.Scalar(code) else {
                    throw AppleJSONError(description: "not valid JSON: a lone surrogate in a \\u escape")
                }
                scalars.append(scalar)
            default: scalars.append(Unicode.Scalar(escape))  // " \ /
            }
        }
        flush()
        return String(scalars)
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension AppleJSONReader {
    /// An array, or a single object where Apple sometimes sends one (legacy answers); null is empty.
    mutating func flexibleArray<Element>(_ element: (inout AppleJSONReader) throws -> Element) throws -> [Element] {
        switch try peek() {
        case .null:
            try skipValue()
            return []
        case .object:
            return [try element(&self)]
        default:
            var elements: [Element] = []
            try readArray { reader in elements.append(try element(&reader)) }
            return elements
        }
    }
}

extension AppleJSONReader {
    /// `read`, or when `lenient` and the value cannot be read, `fallback` (the value is passed over).
    mutating func lenientIf<Value>(_ lenient: Bool, otherwise fallback: Value, _ read: (inout AppleJSONReader) throws -> Value) throws -> Value {
        guard lenient else { return try read(&self) }
        let saved = self
        do {
            return try read(&self)
        } catch {
            self = saved
            try skipValue()
            return fallback
        }
    }
}

extension Date {
    /// The times read from outside (Apple's answers and signed data, notification bodies, receipts):
    /// 1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z. Apple counts from 1970 and has no
    /// earlier date to send; past year 9999 no report, CSV or ISO 8601 reader has four digits for
    /// the year. Anything outside is a forgery or a fault, refused where it is decoded.
    public static let appleMilliseconds: ClosedRange<Int64> = 0...253_402_300_799_999

    /// A time from Apple's `*_ms` value, or a format error naming `field` outside `appleMilliseconds`.
    /// The name is made only for the error: an answer holds about a hundred dates, and each would
    /// otherwise make a string it never uses.
    public init(appleMilliseconds milliseconds: Int64, field: @autoclosure () -> String) throws {
        guard Self.appleMilliseconds.contains(milliseconds) else {
            throw AppleJSONError.outOfRange(field(), "\(milliseconds) is not a date Apple can send (milliseconds since 1970, up to year 9999)")
        }
        self.init(milliseconds: milliseconds)
    }

    /// A time from a count of milliseconds this program made or has already range-checked.
    public init(milliseconds: Int64) {
        self.init(timeIntervalSince1970: Double(milliseconds) / 1_000)
    }

    /// Milliseconds since 1970, as Apple counts; saturated, never a trap (`Timestamp.saturating`).
    public var milliseconds: Int64 {
        Timestamp.saturating(timeIntervalSince1970 * 1_000)
    }
}

/// Apple's display dates, `2014-06-28 14:47:53 Etc/GMT`: only read when the `_ms` field is missing.
enum AppleDisplayDate {
    static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ")
        guard parts.count >= 2 else { return nil }
        if parts.count == 3, parts[2] != "Etc/GMT", parts[2] != "GMT", parts[2] != "UTC" { return nil }
        return Timestamp.parse("\(parts[0]) \(parts[1])", [.spaceSeparator, .missingZoneIsUTC])
    }
}
