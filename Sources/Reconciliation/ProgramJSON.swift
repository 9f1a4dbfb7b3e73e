import CivilCalendar
import Foundation

/// The one JSON encoder for what the program writes for other programs: `summary.json`,
/// `explain --json`, `inspect --json` and JSON logs. One set of settings, so every output agrees:
/// keys sorted (equal values give equal text, and diffs of two nights read well), `/` not
/// escaped, times as `Timestamp` writes them (UTC, ISO 8601). The values are `Encodable`
/// views of the domain types; a view that must keep a key with no value marks it `@Nullable`.
///
/// The hand-written writers of the hot path (`EntitlementJSON`, the verifyReceipt request body)
/// stay where a measurement put them and share `JSONString.append` (AppStoreModels) for their
/// strings.
public enum ProgramJSON {
    /// Indented, one key a line, with a final newline: for people who read it too.
    public static func pretty(_ value: some Encodable) throws -> String {
        String(decoding: try encoder(pretty: true).encode(value), as: UTF8.self) + "\n"
    }

    /// One line, no final newline: a JSON log line or a NOTIFY payload.
    public static func line(_ value: some Encodable) throws -> String {
        String(decoding: try encoder(pretty: false).encode(value), as: UTF8.self)
    }

    private static func encoder(pretty: Bool) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        return encoder
    }
}

/// A value written as `null` when absent, where a synthesized `Encodable` would drop the key: a
/// documented shape keeps every key, so a reader can tell "none" from "not in this version".
@propertyWrapper
public struct Nullable<Value: Encodable>: Encodable {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}
