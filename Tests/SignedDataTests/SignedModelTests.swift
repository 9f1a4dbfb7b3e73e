import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The decoded models on Apple's own payload files (apple-lib/swift/models, every field Apple
/// documents, asserted in Apple's SignedModelTests), and Apple's tolerance: unknown fields
/// ignored (nested objects included), missing optional ones nil, numbers as text accepted.
@Suite struct SignedModelTests {
    static func model(_ name: String) throws -> [UInt8] {
        try Fixtures.bytes("asapi/apple-lib/swift/models/" + name)
    }

    @Test func transactionWithRevocation() throws {
        let transaction = try JWSTransaction(json: Self.model("signedTransactionWithRevocation.json"))
        #expect(transaction.originalTransactionId == "12345" && transaction.transactionId == "23456")
        #expect(transaction.webOrderLineItemId == "34343" && transaction.bundleId == "com.example")
        #expect(transaction.productId == "com.example.product" && transaction.subscriptionGroupIdentifier == "55555")
        #expect(transaction.purchaseDate == Date(ms: 1698148900000) && transaction.originalPurchaseDate == Date(ms: 1698148800000))
        #expect(transaction.expiresDate == Date(ms: 1698149000000) && transaction.quantity == 1)
        #expect(transaction.type == .autoRenewable)
        #expect(transaction.appAccountToken == "7e3fb20b-4cdb-47cc-936d-99d65f608138")
        #expect(transaction.inAppOwnershipType == .purchased && transaction.signedDate == Date(ms: 1698148900000))
        #expect(transaction.revocationReason == 1 && transaction.revocationDate == Date(ms: 1698148950000))
        #expect(transaction.isUpgraded == true && transaction.offerType == 1 && transaction.offerIdentifier == "abc.123")
        #expect(transaction.rawEnvironment == "LocalTesting" && transaction.environment == nil && transaction.storefront == "USA" && transaction.storefrontId == "143441")
        #expect(transaction.transactionReason == .purchase && transaction.price == 10990 && transaction.currency == "USD")
        #expect(transaction.offerDiscountType == .payAsYouGo && transaction.rawOfferDiscountType == "PAY_AS_YOU_GO")
        // In the ledger's terms: the revocation is the cancellation, a paid introductory offer.
        let ledger = transaction.ledgerTransaction
        #expect(ledger.cancellationDate == Date(ms: 1698148950000) && ledger.cancellationReason == 1 && ledger.isUpgraded == true)
        #expect(ledger.isTrialPeriod == false && ledger.isInIntroOfferPeriod == true)
        #expect(ledger.offerCodeRefName == nil && ledger.promotionalOfferId == nil)
    }

    @Test func renewalInfoWithEveryField() throws {
        let renewal = try JWSRenewalInfo(json: Self.model("signedRenewalInfo.json"))
        #expect(renewal.expirationIntent == .customerCancelled && renewal.originalTransactionId == "12345")
        #expect(renewal.autoRenewProductId == "com.example.product.2" && renewal.productId == "com.example.product")
        #expect(renewal.autoRenewStatus == .on && renewal.isInBillingRetryPeriod == true && renewal.priceIncreaseStatus == .customerHasNotResponded)
        #expect(renewal.gracePeriodExpiresDate == Date(ms: 1698148900000) && renewal.signedDate == Date(ms: 1698148800000))
        #expect(renewal.rawEnvironment == "LocalTesting" && renewal.environment == nil && renewal.recentSubscriptionStartDate == Date(ms: 1698148800000))
        #expect(renewal.renewalDate == Date(ms: 1698148850000))
    }

    @Test func notificationPayload() throws {
        let notification = try NotificationV2Payload(json: Self.model("signedNotification.json"))
        #expect(notification.notificationType == .subscribed && notification.subtype == .initialBuy && notification.rawSubtype == "INITIAL_BUY")
        #expect(notification.notificationUUID == "002e14d5-51f5-4503-b5a8-c3a1af68eb20")
        #expect(notification.rawEnvironment == "LocalTesting" && notification.environment == nil && notification.appAppleId == 41234 && notification.bundleId == "com.example")
        #expect(notification.bundleVersion == "1.2.3" && notification.status == .active)
        #expect(notification.signedTransactionInfo == "signed_transaction_info_value")
        #expect(notification.signedRenewalInfo == "signed_renewal_info_value")
        #expect(notification.version == "2.0" && notification.signedDate == Date(ms: 1698148900000))
    }

    @Test func everyModelFileOfAppleDecodes() throws {
        for name in ["signedSummaryNotification.json", "signedConsumptionRequestNotification.json"] {
            #expect(throws: Never.self) { try NotificationV2Payload(json: Self.model(name)) }
        }
        #expect(throws: Never.self) { try JWSTransaction(json: Self.model("signedTransaction.json")) }
    }

    static let tolerance: [(json: String, price: Int64?, purchase: Date?, upgraded: Bool?)] = [
        (#"{"transactionId":"1","productId":"p"}"#, nil, nil, nil),
        (#"{"transactionId":1,"productId":"p","price":"990","purchaseDate":"1700000000000","isUpgraded":"true"}"#, 990, Date(ms: 1700000000000), true),
        (#"{"transactionId":"1","productId":"p","price":990,"purchaseDate":1697679936049.7297,"isUpgraded":1,"x":{"y":[1,{"z":null}]}}"#, 990, Date(ms: 1697679936049), true),
        (#"{"transactionId":"1","productId":"p","price":null,"purchaseDate":null,"isUpgraded":false,"newField":"kept out"}"#, nil, nil, false),
    ]

    @Test(arguments: tolerance)
    func toleratesApplesSpellings(json: String, price: Int64?, purchase: Date?, upgraded: Bool?) throws {
        let transaction = try JWSTransaction(json: Array(json.utf8))
        #expect(transaction.transactionId == "1" && transaction.productId == "p")
        #expect(transaction.price == price && transaction.purchaseDate == purchase && transaction.isUpgraded == upgraded)
    }

    @Test(arguments: [
        #"{"productId":"p"}"#, #"{"transactionId":"1"}"#, #"{"transactionId":"1","productId":"p","price":"ten"}"#,
        #"{"transactionId":"1","productId":"p","purchaseDate":true}"#, #"[1]"#, #"{"transactionId":"1","productId":"p""#,
    ])
    func refusesWhatNoSpellingExplains(json: String) {
        #expect(throws: (any Error).self) { try JWSTransaction(json: Array(json.utf8)) }
    }
}
