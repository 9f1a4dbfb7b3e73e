import Foundation

/// An App Store Server Notification (version 1), named as Apple names it. Decoding is as
/// tolerant as for verifyReceipt answers; unknown notification types are kept as they came.
public struct ServerNotification: Sendable {
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

    /// Why a body is not a usable notification (docs/notifications.md, "Server notifications (v1)": outcome `invalid`).
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    /// Decodes a stored body; throws `Invalid` for one without a type or a unified receipt.
    public static func decode(_ body: some Collection<UInt8>) throws -> ServerNotification {
        do {
            return try AppleJSONReader.read(body) { reader in try ServerNotification(reading: &reader) }
        } catch let invalid as Invalid {
            throw invalid
        } catch {
            throw Invalid(description: "not a notification: \(error)")
        }
    }

    private init(reading reader: inout AppleJSONReader) throws {
        var type: AppleJSONValue? = nil, password: AppleJSONValue? = nil, environment: AppleJSONValue? = nil
        var autoRenewStatus: AppleJSONValue? = nil, autoRenewProductId: AppleJSONValue? = nil
        var expirationIntent: AppleJSONValue? = nil, bid: AppleJSONValue? = nil, bvrs: AppleJSONValue? = nil
        var originalTransactionId: AppleJSONValue? = nil
        var unifiedReceipt: VerifyReceiptResponse?
        try reader.enterObject()
        while let key = try reader.nextMember() {
            if key == "notification_type" { type = try reader.value() }
            else if key == "password" { password = try reader.value() }
            else if key == "environment" { environment = try reader.value() }
            else if key == "auto_renew_status" { autoRenewStatus = try reader.value() }
            else if key == "auto_renew_product_id" { autoRenewProductId = try reader.value() }
            else if key == "expiration_intent" { expirationIntent = try reader.value() }
            else if key == "bid" { bid = try reader.value() }
            else if key == "bvrs" { bvrs = try reader.value() }
            else if key == "original_transaction_id" { originalTransactionId = try reader.value() }
            else if key == "unified_receipt", try reader.peek() == .object {
                // Apple sometimes leaves status out of unified_receipt; it is a hint either way.
                let saved = reader
                do {
                    unifiedReceipt = try VerifyReceiptResponse(reading: &reader, lenient: false)
                } catch {
                    reader = saved
                    unifiedReceipt = try VerifyReceiptResponse(reading: &reader, lenient: true)
                }
            } else {
                try reader.skipValue()
            }
        }
        guard let type, type.kind == .string, let notificationType = try? type.string() else {
            throw Invalid(description: "no notification_type string")
        }
        guard let unifiedReceipt else { throw Invalid(description: "no unified_receipt object") }
        self.notificationType = notificationType
        self.password = try? password?.string()
        self.environment = try? environment?.string()
        self.autoRenewStatus = try? autoRenewStatus?.bool()
        self.autoRenewProductId = try? autoRenewProductId?.string()
        self.expirationIntent = try? expirationIntent?.int("expiration_intent")
        self.bid = try? bid?.string()
        self.bvrs = try? bvrs?.string()
        self.originalTransactionId = try? originalTransactionId?.string()
        self.unifiedReceipt = unifiedReceipt
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
