import AppStoreModels
import Foundation
import Testing
import TestSupport

/// A notification's `unified_receipt` has the shape of a verifyReceipt answer and decodes as one.
@Suite struct UnifiedReceiptFixtureTests {
    static func unifiedReceipt(_ name: String) throws -> VerifyReceiptResponse {
        let object = try JSONSerialization.jsonObject(with: Fixtures.data("notifications/\(name)")) as? [String: Any]
        let unified = try #require(object?["unified_receipt"])
        return try VerifyReceiptResponse.decode(Array(JSONSerialization.data(withJSONObject: unified)))
    }

    @Test func didChangeRenewalStatus() throws {
        let receipt = try Self.unifiedReceipt("imdhemy-server-notification-DID_CHANGE_RENEWAL_STATUS.json")
        #expect(receipt.status == 0)
        #expect(receipt.environment == "Production")
        #expect(receipt.latestReceipt == "ZmFrZV9yZWNlaXB0")
        #expect(receipt.latestReceiptInfo.count == 54)
        #expect(receipt.latestReceiptInfo.filter { $0.productId == "one_month_subscription" }.count == 48)
        #expect(receipt.latestReceiptInfo.filter { $0.productId == "one_year_subscription" }.count == 6)
        #expect(Set(receipt.latestReceiptInfo.compactMap(\.originalTransactionId)) == ["1000000723811158"])
        // Sorted newest first: the greatest expiry is the first element.
        let newest = try #require(receipt.latestReceiptInfo.max { ($0.expiresDate ?? .distantPast) < ($1.expiresDate ?? .distantPast) })
        #expect(newest.transactionId == "1000000746095599")
        #expect(receipt.latestReceiptInfo.first?.transactionId == "1000000746095599")
        let upgraded = Set(receipt.latestReceiptInfo.filter { $0.isUpgraded == true }.map(\.transactionId))
        #expect(upgraded == ["1000000739321864", "1000000739325339", "1000000739325308", "1000000739325323"])
        let pending = try #require(receipt.pendingRenewalInfo.first)
        #expect(pending.isInBillingRetryPeriod == false)
        #expect(pending.autoRenewStatus == false)
        #expect(pending.originalTransactionId == "1000000723811158")
        #expect(pending.productId == "one_month_subscription")
        #expect(pending.expirationIntent == 1)
    }

    @Test func didRenew() throws {
        let receipt = try Self.unifiedReceipt("aporat-serverNotificationRequest-DID_RENEW.json")
        #expect(receipt.status == 0)
        #expect(receipt.latestReceiptInfo.count == 1)
        let transaction = try #require(receipt.latestReceiptInfo.first)
        #expect(transaction.transactionId == "100000000000001")
        #expect(transaction.expiresDate == Date(ms: 1_747_636_952_000))
        #expect(transaction.inAppOwnershipType == "PURCHASED")
    }
}
