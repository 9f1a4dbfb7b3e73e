import Foundation

/// An App Store Server Notification (version 1), named as Apple names it. Decoding is as
/// tolerant as for verifyReceipt answers; unknown notification types are kept as they came.
public struct ServerNotification: Decodable, Sendable {
    /// `DID_RENEW`, `REFUND`, `CANCEL`, `REVOKE`, `DID_CHANGE_RENEWAL_STATUS`, `CONSUMPTION_REQUEST`, ...
    public var notificationType: String
    /// The app's shared secret, as Apple sends it: compared in constant time, never logged.
    public var password: String?
    /// `PROD` or `Sandbox` (`Production` has been seen and means `PROD`).
    public var environment: String?
    public var autoRenewStatus: Bool?
    public var autoRenewProductId: String?
    public var expirationIntent: Int?
    public var bid: String?
    public var bvrs: String?
    public var originalTransactionId: String?
    public var unifiedReceipt: VerifyReceiptResponse

    /// Why a body is not a usable notification (contract section 8: outcome `invalid`).
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AppleKey.self)
        guard let type = try? container.decode(String.self, forKey: AppleKey("notification_type")) else {
            throw Invalid(description: "no notification_type string")
        }
        guard (try? container.nestedContainer(keyedBy: AppleKey.self, forKey: AppleKey("unified_receipt"))) != nil else {
            throw Invalid(description: "no unified_receipt object")
        }
        notificationType = type
        password = try? container.flexibleString("password")
        environment = try? container.flexibleString("environment")
        autoRenewStatus = try? container.flexibleBool("auto_renew_status")
        autoRenewProductId = try? container.flexibleString("auto_renew_product_id")
        expirationIntent = try? container.flexibleInt("expiration_intent")
        bid = try? container.flexibleString("bid")
        bvrs = try? container.flexibleString("bvrs")
        originalTransactionId = try? container.flexibleString("original_transaction_id")
        // Apple sometimes leaves status out of unified_receipt; it is a hint either way.
        do {
            unifiedReceipt = try container.decode(VerifyReceiptResponse.self, forKey: AppleKey("unified_receipt"))
        } catch {
            let nested = try container.nestedContainer(keyedBy: AppleKey.self, forKey: AppleKey("unified_receipt"))
            unifiedReceipt = VerifyReceiptResponse(
                status: (try? nested.flexibleInt("status")) ?? 0, environment: try? nested.flexibleString("environment"),
                latestReceipt: try? nested.flexibleString("latest_receipt"),
                latestReceiptInfo: (try? nested.flexibleArray("latest_receipt_info", of: Transaction.self)) ?? [],
                pendingRenewalInfo: (try? nested.flexibleArray("pending_renewal_info", of: PendingRenewalInfo.self)) ?? [])
        }
    }

    /// Decodes a stored body; throws `Invalid` for one without a type or a unified receipt.
    public static func decode(_ body: some Collection<UInt8>) throws -> ServerNotification {
        do {
            return try JSONDecoder().decode(ServerNotification.self, from: Data(body))
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, let invalid = context.underlyingError as? Invalid { throw invalid }
            throw Invalid(description: "not a notification: \(error)")
        }
    }

    /// `Production` or `Sandbox`, as the rest of the job spells environments.
    public var appleEnvironment: AppleEnvironment? {
        AppleEnvironment(appleName: environment) ?? AppleEnvironment(appleName: unifiedReceipt.environment)
    }

    /// Every original transaction id the notification names: top level, latest_receipt_info and pending_renewal_info.
    public var originalTransactionIds: [String] {
        var ids = [originalTransactionId].compactMap { $0 }
        ids += unifiedReceipt.latestReceiptInfo.map { $0.originalTransactionId ?? $0.transactionId }
        ids += unifiedReceipt.pendingRenewalInfo.compactMap(\.originalTransactionId)
        var seen = Set<String>()
        return ids.filter { seen.insert($0).inserted }
    }

    /// Compares the notification's password with the shared secret in time that does not depend
    /// on where they differ.
    public func passwordMatches(_ secret: String) -> Bool {
        let given = Array((password ?? "").utf8)
        let expected = Array(secret.utf8)
        var difference = UInt8(given.count == expected.count ? 0 : 1)
        for index in 0..<max(given.count, expected.count) {
            let left = index < given.count ? given[index] : 0
            let right = index < expected.count ? expected[index] : 0
            difference |= left ^ right
        }
        return difference == 0 && password != nil
    }
}
