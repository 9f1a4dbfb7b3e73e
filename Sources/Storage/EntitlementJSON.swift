import AppStoreModels
import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// Entitlements as stored in `iap.corrections.before/after`: every column, times with
/// microseconds (what PostgreSQL keeps), so `jsonb_populate_record` rebuilds the exact row and a
/// stored row compares equal to the `before` it was planned against.
package enum EntitlementJSON {
    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let micros = Timestamp.parseMicroseconds(text[...], .spaceSeparator) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a timestamp"))
            }
            return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
        }
        return decoder
    }()

    /// Written by hand, keys in sorted order as `JSONEncoder` with `.sortedKeys` wrote them: every
    /// planned correction writes two of these, and `JSONEncoder` was 4 % of a run's CPU.
    package static func encode(_ entitlement: Entitlement?) throws -> String? {
        guard let entitlement else { return nil }
        var json: [UInt8] = []
        json.reserveCapacity(512)
        func key(_ name: StaticString) {
            json.append(json.isEmpty ? UInt8(ascii: "{") : UInt8(ascii: ","))
            json.append(UInt8(ascii: "\""))
            json.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            json.append(contentsOf: "\":".utf8)
        }
        func string(_ name: StaticString, _ value: String?) {
            key(name)
            guard let value else { return json.append(contentsOf: "null".utf8) }
            JSONString.append(value, to: &json)
        }
        func bool(_ name: StaticString, _ value: Bool?) {
            key(name)
            json.append(contentsOf: (value.map { $0 ? "true" : "false" } ?? "null").utf8)
        }
        func date(_ name: StaticString, _ value: Date?) {
            key(name)
            guard let value else { return json.append(contentsOf: "null".utf8) }
            json.append(UInt8(ascii: "\""))
            value.appendPostgresText(to: &json)
            json.append(UInt8(ascii: "\""))
        }
        string("account_id", entitlement.accountId)
        bool("auto_renew", entitlement.autoRenew)
        string("auto_renew_product_id", entitlement.autoRenewProductId)
        bool("entitled", entitlement.entitled)
        string("environment", entitlement.environment)
        date("expires_at", entitlement.expiresAt)
        date("grace_period_expires_at", entitlement.gracePeriodExpiresAt)
        string("latest_transaction_id", entitlement.latestTransactionId)
        string("original_transaction_id", entitlement.originalTransactionId)
        string("ownership_type", entitlement.ownershipType)
        string("product_id", entitlement.productId)
        date("refunded_at", entitlement.refundedAt)
        string("state", entitlement.state.rawValue)
        json.append(UInt8(ascii: "}"))
        return String(decoding: json, as: UTF8.self)
    }

    static func decode(_ json: String?) throws -> Entitlement? {
        guard let json else { return nil }
        return try decoder.decode(Row.self, from: Data(json.utf8)).entitlement
    }

    /// The JSON's keys are the table's columns: they belong here, not to the domain's `Entitlement`.
    private struct Row: Decodable {
        var entitlement: Entitlement

        enum CodingKeys: String, CodingKey {
            case accountId = "account_id", productId = "product_id", originalTransactionId = "original_transaction_id"
            case latestTransactionId = "latest_transaction_id", state, expiresAt = "expires_at"
            case gracePeriodExpiresAt = "grace_period_expires_at", autoRenew = "auto_renew"
            case autoRenewProductId = "auto_renew_product_id", environment, ownershipType = "ownership_type"
            case refundedAt = "refunded_at"
        }

        init(from decoder: any Decoder) throws {
            let row = try decoder.container(keyedBy: CodingKeys.self)
            entitlement = Entitlement(
                accountId: try row.decode(String.self, forKey: .accountId), productId: try row.decode(String.self, forKey: .productId),
                originalTransactionId: try row.decode(String.self, forKey: .originalTransactionId),
                latestTransactionId: try row.decodeIfPresent(String.self, forKey: .latestTransactionId),
                state: try row.decode(EntitlementState.self, forKey: .state),
                expiresAt: try row.decodeIfPresent(Date.self, forKey: .expiresAt),
                gracePeriodExpiresAt: try row.decodeIfPresent(Date.self, forKey: .gracePeriodExpiresAt),
                autoRenew: try row.decodeIfPresent(Bool.self, forKey: .autoRenew),
                autoRenewProductId: try row.decodeIfPresent(String.self, forKey: .autoRenewProductId),
                environment: try row.decodeIfPresent(String.self, forKey: .environment),
                ownershipType: try row.decodeIfPresent(String.self, forKey: .ownershipType),
                refundedAt: try row.decodeIfPresent(Date.self, forKey: .refundedAt))
        }
    }
}
