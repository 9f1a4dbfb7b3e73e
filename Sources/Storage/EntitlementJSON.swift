import Foundation
import Postgres
import Reconciliation

/// Entitlements as stored in `iap.corrections.before/after`: every column, times with
/// microseconds (what PostgreSQL keeps), so `jsonb_populate_record` rebuilds the exact row and a
/// stored row compares equal to the `before` it was planned against.
enum EntitlementJSON {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(PostgresTimestamp.format(microsecondsSince1970: Int64((date.timeIntervalSince1970 * 1_000_000).rounded())))
        }
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let micros = PostgresTimestamp.parse(text[...]) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a timestamp"))
            }
            return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
        }
        return decoder
    }()

    static func encode(_ entitlement: Entitlement?) throws -> String? {
        guard let entitlement else { return nil }
        return String(decoding: try encoder.encode(entitlement), as: UTF8.self)
    }

    static func decode(_ json: String?) throws -> Entitlement? {
        guard let json else { return nil }
        return try decoder.decode(Entitlement.self, from: Data(json.utf8))
    }
}
