import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The real notifications in Tests/Fixtures/notifications decode to what PROVENANCE.md says.
@Suite struct ServerNotificationFixtureTests {
    static func load(_ name: String) throws -> ServerNotification {
        try ServerNotification.decode(Fixtures.bytes("notifications/\(name)"))
    }

    @Test func didRenew() throws {
        let notification = try Self.load("aporat-serverNotificationRequest-DID_RENEW.json")
        #expect(notification.notificationType == "DID_RENEW")
        #expect(notification.environment == "PROD")
        #expect(notification.appleEnvironment == .production)
        #expect(notification.autoRenewProductId == "my.app.subscription.monthly")
        #expect(notification.autoRenewStatus == true)  // from the string "true"
        #expect(notification.bid == "my.app")
        #expect(notification.bvrs == "1.0.0")
        #expect(notification.originalTransactionId == "100000000000000")
        #expect(notification.password == "dummy_shared_secret")
        #expect(notification.passwordMatches("dummy_shared_secret"))
        #expect(!notification.passwordMatches("dummy_shared_secreT"))
        #expect(!notification.passwordMatches("dummy"))
        #expect(!notification.passwordMatches(""))
        #expect(notification.unifiedReceipt.latestReceiptInfo.map(\.transactionId) == ["100000000000001"])
        #expect(notification.unifiedReceipt.latestReceiptInfo.first?.expiresDate == Date(ms: 1_747_636_952_000))
        #expect(notification.originalTransactionIds.first == "100000000000000")
    }

    @Test func didChangeRenewalStatus() throws {
        let notification = try Self.load("imdhemy-server-notification-DID_CHANGE_RENEWAL_STATUS.json")
        #expect(notification.notificationType == "DID_CHANGE_RENEWAL_STATUS")
        #expect(notification.environment == "Production")
        #expect(notification.appleEnvironment == .production)
        #expect(notification.autoRenewStatus == false)
        #expect(notification.autoRenewProductId == "one_month_subscription")
        #expect(notification.bid == "com.some.thing")
        #expect(notification.bvrs == "34")
        #expect(notification.password == "********")
        #expect(notification.unifiedReceipt.status == 0)
        #expect(notification.unifiedReceipt.latestReceiptInfo.count == 54)
        #expect(notification.originalTransactionIds == ["1000000723811158"])
    }

    @Test func invalidBodies() {
        #expect(throws: ServerNotification.Invalid.self) { try ServerNotification.decode(Array(#"{"unified_receipt": {}}"#.utf8)) }
        #expect(throws: ServerNotification.Invalid.self) { try ServerNotification.decode(Array(#"{"notification_type": "REFUND"}"#.utf8)) }
        #expect(throws: ServerNotification.Invalid.self) {
            try ServerNotification.decode(Array(#"{"notification_type": 7, "unified_receipt": {}}"#.utf8))
        }
        #expect(throws: ServerNotification.Invalid.self) {
            try ServerNotification.decode(Array(#"{"notification_type": "REFUND", "unified_receipt": "x"}"#.utf8))
        }
        let unknown = try? ServerNotification.decode(Array(#"{"notification_type": "SOMETHING_NEW", "unified_receipt": {}}"#.utf8))
        #expect(unknown?.notificationType == "SOMETHING_NEW")
    }
}
