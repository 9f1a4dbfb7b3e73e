import Foundation

/// Apple's JSON as it really comes: numbers as strings or numbers, flags as "true"/"false",
/// "1"/"0", true/false or 1/0, ids as strings or numbers. Every reader here returns nil for a
/// missing key or JSON null, and throws only for a value no spelling can explain.
struct AppleKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension KeyedDecodingContainer where Key == AppleKey {
    /// A string, or a number written as its decimal text (ids such as `transaction_id`).
    func flexibleString(_ key: String) throws -> String? {
        let key = AppleKey(key)
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let text = try? decode(String.self, forKey: key) { return text }
        if let number = try? decode(Int64.self, forKey: key) { return String(number) }
        if let number = try? decode(Double.self, forKey: key), number.rounded() == number, abs(number) < 1e18 {
            return String(Int64(number))
        }
        if let flag = try? decode(Bool.self, forKey: key) { return flag ? "true" : "false" }
        throw DecodingError.typeMismatch(
            String.self, .init(codingPath: codingPath + [key], debugDescription: "expected a string or a number"))
    }

    /// An integer written as a number or as decimal text; empty text counts as missing.
    func flexibleInt64(_ key: String) throws -> Int64? {
        guard let text = try flexibleString(key)?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let value = Int64(text) { return value }
        if let value = Double(text), value.rounded() == value, abs(value) < 9e18 { return Int64(value) }
        throw DecodingError.dataCorrupted(
            .init(codingPath: codingPath + [AppleKey(key)], debugDescription: "expected an integer"))
    }

    func flexibleInt(_ key: String) throws -> Int? {
        try flexibleInt64(key).map { Int($0) }
    }

    /// A flag in any of Apple's spellings: true/false, "true"/"false", 1/0, "1"/"0".
    func flexibleBool(_ key: String) throws -> Bool? {
        let codingKey = AppleKey(key)
        guard contains(codingKey), try !decodeNil(forKey: codingKey) else { return nil }
        if let flag = try? decode(Bool.self, forKey: codingKey) { return flag }
        if let number = try? decode(Int.self, forKey: codingKey) {
            if number == 1 { return true }
            if number == 0 { return false }
        }
        if let text = try? decode(String.self, forKey: codingKey) {
            switch text.trimmingCharacters(in: .whitespaces).lowercased() {
            case "true", "1", "yes": return true
            case "false", "0", "no": return false
            case "": return nil
            default: break
            }
        }
        throw DecodingError.dataCorrupted(
            .init(codingPath: codingPath + [codingKey], debugDescription: "expected a flag (true/false or 1/0)"))
    }

    /// A time from `<name>_ms` (milliseconds since 1970, string or number). When Apple left out
    /// the `_ms` field, the display field `<name>` is read instead if it holds milliseconds or
    /// `yyyy-MM-dd HH:mm:ss Etc/GMT` (legacy and hand-made answers do this).
    func appleDate(_ name: String) throws -> Date? {
        if let milliseconds = try flexibleInt64(name + "_ms") {
            return Date(milliseconds: milliseconds)
        }
        guard let display = try? flexibleString(name), !display.isEmpty else { return nil }
        if let milliseconds = Int64(display) { return Date(milliseconds: milliseconds) }
        return AppleDisplayDate.parse(display)
    }

    /// An array, or a single object where Apple sometimes sends one (legacy answers).
    func flexibleArray<Element: Decodable>(_ key: String, of type: Element.Type) throws -> [Element] {
        let codingKey = AppleKey(key)
        guard contains(codingKey), try !decodeNil(forKey: codingKey) else { return [] }
        if let array = try? decode([Element].self, forKey: codingKey) { return array }
        return [try decode(Element.self, forKey: codingKey)]
    }
}

extension Date {
    /// A time from Apple's `*_ms` value.
    public init(milliseconds: Int64) {
        self.init(timeIntervalSince1970: Double(milliseconds) / 1_000)
    }

    /// Milliseconds since 1970, as Apple counts.
    public var milliseconds: Int64 {
        Int64((timeIntervalSince1970 * 1_000).rounded())
    }
}

/// Apple's display dates, `2014-06-28 14:47:53 Etc/GMT`: only read when the `_ms` field is missing.
enum AppleDisplayDate {
    static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ")
        guard parts.count >= 2 else { return nil }
        if parts.count == 3, parts[2] != "Etc/GMT", parts[2] != "GMT", parts[2] != "UTC" { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.date(from: "\(parts[0]) \(parts[1])")
    }
}
