import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The real Apple answers in Tests/Fixtures/verify-responses decode to what PROVENANCE.md says.
@Suite struct VerifyReceiptResponseFixtureTests {
    static func load(_ name: String) throws -> VerifyReceiptResponse {
        try VerifyReceiptResponse.decode(Fixtures.bytes("verify-responses/\(name)"))
    }

    @Test(arguments: try Fixtures.files(in: "verify-responses"))
    func everyFixtureDecodes(_ name: String) throws {
        let response = try Self.load(name)
        #expect([0, 21002, 21006, 21010, 21104].contains(response.status))
    }

    struct Expectation: Sendable, CustomTestStringConvertible {
        var file: String
        var status: Int
        var environment: String?
        var bundleId: String?
        var inAppCount: Int
        var latestCount: Int
        var pendingCount: Int
        var testDescription: String { file }
    }

    static let expectations: [Expectation] = [
        .init(file: "imdhemy-verify_receipt_response-status0.json", status: 0, environment: "Production",
              bundleId: "com.some.thing", inAppCount: 42, latestCount: 1, pendingCount: 1),
        .init(file: "itunesiap-autorenew-response2-sandbox-status0.json", status: 0, environment: "Sandbox",
              bundleId: "com.example.app", inAppCount: 13, latestCount: 18, pendingCount: 1),
        .init(file: "aporat-inAppPurchaseResponse-status0-sandbox.json", status: 0, environment: "Sandbox",
              bundleId: "com.myapp", inAppCount: 2, latestCount: 2, pendingCount: 1),
        .init(file: "revenuecat-verifyReceiptSample1.json", status: 0, environment: "Sandbox",
              bundleId: "com.revenuecat.sampleapp", inAppCount: 9, latestCount: 9, pendingCount: 1),
        .init(file: "linjunpop-receipt_verifier-auto_renewable_receipt.json", status: 0, environment: "Sandbox",
              bundleId: "com.sumiapp.GridDiary", inAppCount: 15, latestCount: 0, pendingCount: 0),
        .init(file: "linjunpop-receipt_verifier-receipt.json", status: 0, environment: "Sandbox",
              bundleId: "com.sumiapp.GridDiary", inAppCount: 2, latestCount: 0, pendingCount: 0),
        .init(file: "alexalok-AppleReceiptVerifier.NET-Valid_Production_Family_Shared.json", status: 0,
              environment: "Production", bundleId: "com.myapp.app", inAppCount: 1, latestCount: 1, pendingCount: 2),
        .init(file: "alexalok-AppleReceiptVerifier.NET-Valid_Production_Null_Download_Id.json", status: 0,
              environment: "Production", bundleId: "com.test.app", inAppCount: 2, latestCount: 1, pendingCount: 1),
        .init(file: "venice-receipt_expired_cancelled-status21006-ios6-style.json", status: 21006, environment: nil,
              bundleId: "com.foo.bar", inAppCount: 1, latestCount: 1, pendingCount: 0),
        .init(file: "aporat-inAppPurchaseInvalidReceiptResponse-status21002.json", status: 21002, environment: nil,
              bundleId: nil, inAppCount: 0, latestCount: 0, pendingCount: 0),
    ]

    @Test(arguments: expectations)
    func shapes(_ expected: Expectation) throws {
        let response = try Self.load(expected.file)
        #expect(response.status == expected.status)
        #expect(response.environment == expected.environment)
        #expect(response.receipt?.bundleId == expected.bundleId)
        #expect(response.receipt?.inApp.count ?? 0 == expected.inAppCount)
        #expect(response.latestReceiptInfo.count == expected.latestCount)
        #expect(response.pendingRenewalInfo.count == expected.pendingCount)
    }

    /// youknowone/itunes-iap `test_autorenew_middleage`.
    @Test func itunesIAPAutorenewFields() throws {
        let response = try Self.load("itunesiap-autorenew-response2-sandbox-status0.json")
        let receipt = try #require(response.receipt)
        #expect(receipt.applicationVersion == "8")
        #expect(receipt.receiptCreationDate == Date(ms: 1_500_973_280_000))
        #expect(receipt.requestDate == Date(ms: 1_501_149_119_587))
        #expect(receipt.originalPurchaseDate == Date(ms: 1_375_340_400_000))
        #expect(receipt.originalApplicationVersion == "1.0")
        let lastInApp = try #require(receipt.inApp.last)
        #expect(lastInApp == Transaction(
            transactionId: "1000000318407192", originalTransactionId: "1000000318012065", productId: "testproduct",
            quantity: 1, purchaseDate: Date(ms: 1_500_973_279_000), originalPurchaseDate: Date(ms: 1_500_884_005_000),
            expiresDate: Date(ms: 1_500_973_579_000), isTrialPeriod: false, webOrderLineItemId: "1000000035713887"))
        let lastLatest = try #require(response.latestReceiptInfo.last)
        #expect(lastLatest.transactionId == "1000000318420598")
        #expect(lastLatest.expiresDate == Date(ms: 1_500_975_210_000))
        #expect(lastLatest.purchaseDate == Date(ms: 1_500_974_910_000))
        #expect(lastLatest.webOrderLineItemId == "1000000035725368")
        let pending = try #require(response.pendingRenewalInfo.first)
        #expect(pending.expirationIntent == 1)
        #expect(pending.autoRenewProductId == "testproduct")
        #expect(pending.isInBillingRetryPeriod == false)
        #expect(pending.autoRenewStatus == false)
        #expect(pending.originalTransactionId == nil)  // this answer really has none
        #expect(Array(response.latestReceiptInfo.prefix(receipt.inApp.count)) == receipt.inApp)
        #expect(response.latestReceipt == "DUMMY_RECEIPT:_A_BASE64_ENCODED_RECEIPT_DATA_WILL_BE_HERE")
    }

    /// Numbers where strings are usual, JSON booleans for flags.
    @Test func aporatNumbersAndBooleans() throws {
        let response = try Self.load("aporat-inAppPurchaseResponse-status0-sandbox.json")
        let first = try #require(response.receipt?.inApp.first)
        #expect(first.productId == "myapp.1")
        #expect(first.transactionId == "1000000156455961")
        #expect(response.latestReceiptInfo[0].expiresDate == Date(ms: 1_394_619_485_000))
        #expect(response.latestReceiptInfo[0].isTrialPeriod == false)
        #expect(response.latestReceiptInfo[0].quantity == 1)
        #expect(response.pendingRenewalInfo.first?.productId == "Test_Subscription")
        #expect(response.pendingRenewalInfo.first?.originalTransactionId == "original_transaction_id_value")
    }

    @Test func retryFlagInBothSpellings() throws {
        let retryable = try Self.load("bk-rs-apple-apis-rs-response_body-status21104.json")
        #expect(retryable.status == 21104)
        #expect(retryable.isRetryable == true)
        #expect(retryable.exception == "com.apple.jingle.commercelogic.inapplocker.exception.MZInAppLockerAccessException")
        let permanent = try Self.load("bk-rs-apple-apis-rs-response_body-status21010.json")
        #expect(permanent.status == 21010)
        #expect(permanent.environment == "Production")
        #expect(permanent.isRetryable == false)
        let hyphenated = try VerifyReceiptResponse.decode(Array(#"{"status": 21199, "is-retryable": "1"}"#.utf8))
        #expect(hyphenated.isRetryable == true)
        let unknown = try VerifyReceiptResponse.decode(Array(#"{"status": "31337", "novel_field": {"x": 1}}"#.utf8))
        #expect(unknown.status == 31337)
    }

    /// mozilla/bigquery-etl: ids and times as JSON numbers, a refund with reason 0.
    @Test func mozillaRefund() throws {
        let response = try Self.load("mozilla-bigquery-etl-parse_apple_receipt.json")
        let inApp = try #require(response.receipt?.inApp.first)
        #expect(inApp.transactionId == "1000000762442282")
        #expect(inApp.expiresDate == Date(ms: 1_610_070_325_000))
        let latest = try #require(response.latestReceiptInfo.first)
        #expect(latest.transactionId == "1000000762449239")
        #expect(latest.cancellationDate == Date(ms: 1_610_071_836_000))
        #expect(latest.cancellationReason == 0)
        #expect(inApp.promotionalOfferId == "promo code")
        #expect(response.pendingRenewalInfo.first?.autoRenewStatus == false)
        #expect(response.pendingRenewalInfo.first?.isInBillingRetryPeriod == false)
    }

    /// The display strings were edited by hand: times come from the `_ms` fields.
    @Test func crashoverrideReadsMillisecondsNotDisplayStrings() throws {
        let response = try Self.load("crashoverride777-swifty-receipt-validator-ReceiptResponseValidSubscription.json")
        let raw = try JSONSerialization.jsonObject(with: Fixtures.data(
            "verify-responses/crashoverride777-swifty-receipt-validator-ReceiptResponseValidSubscription.json")) as? [String: Any]
        let rawLatest = try #require((raw?["latest_receipt_info"] as? [[String: Any]])?.first)
        let expiresMs = try #require(Int64("\(rawLatest["expires_date_ms"]!)"))
        #expect(response.latestReceiptInfo.first?.expiresDate == Date(ms: expiresMs))
    }

    /// A legacy answer: `receipt` is one transaction, expiry in `expires_date` as milliseconds.
    @Test func veniceLegacy21006() throws {
        let response = try Self.load("venice-receipt_expired_cancelled-status21006-ios6-style.json")
        let transaction = try #require(response.receipt?.inApp.first)
        #expect(transaction.productId == "com.foo.product1")
        #expect(transaction.transactionId == "140000527258824")
        #expect(transaction.isTrialPeriod == true)
        #expect(transaction.expiresDate == Date(ms: 1_550_386_188_000))
    }

    /// No `expires_date_ms` at all: the display string is the only expiry there is.
    @Test func veniceDisplayDateFallback() throws {
        let response = try Self.load("venice-receipt_not_expired_cancelled-status0.json")
        let transaction = try #require(response.receipt?.inApp.first)
        #expect(transaction.transactionId == "1000000070107111")
        #expect(transaction.originalTransactionId == "1000000061051111")
        #expect(transaction.expiresDate == Date(ms: 1_403_966_873_000))  // 2014-06-28 14:47:53 UTC
        let pending = try #require(response.pendingRenewalInfo.first)
        #expect(pending.expirationIntent == 1)
        #expect(pending.autoRenewStatus == false)
        #expect(pending.isInBillingRetryPeriod == false)
        #expect(pending.originalTransactionId == "37xxxxxxxxx89")
    }

    @Test func familySharingAndTwoChains() throws {
        let response = try Self.load("alexalok-AppleReceiptVerifier.NET-Valid_Production_Family_Shared.json")
        #expect(response.receipt?.inApp.first?.inAppOwnershipType == "FAMILY_SHARED")
        let originals = Set(response.pendingRenewalInfo.compactMap(\.originalTransactionId))
        #expect(originals.count == 2)
    }

    @Test func cancellationResponse() throws {
        let response = try Self.load("gabrielgarza-monza-cancellation_response.json")
        let last = try #require(response.latestReceiptInfo.last)
        #expect(last.transactionId == "1000000218147500")
        #expect(last.isTrialPeriod == true)
        #expect(last.cancellationDate != nil)
    }

    @Test func excludingOldSubscriptions() throws {
        let response = try Self.load("alexalok-AppleReceiptVerifier.NET-Valid_Production_Excluding_Old_Subscriptions.json")
        let latest = try #require(response.latestReceiptInfo.first)
        #expect(latest.productId == "com.test.app.proYearly")
        #expect(latest.expiresDate == Date(ms: 1_624_370_224_000))
        #expect(latest.isTrialPeriod == false)
    }

    @Test func byteOrderMarkAndNullDownloadId() throws {
        let bytes = try Fixtures.bytes("verify-responses/alexalok-AppleReceiptVerifier.NET-Valid_Production_Null_Download_Id.json")
        #expect(bytes.starts(with: [0xEF, 0xBB, 0xBF]))
        #expect(try VerifyReceiptResponse.decode(bytes).status == 0)
    }

    @Test func garbageIsAnError() {
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array("<html>502</html>".utf8)) }
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(#"{"status": 0, "latest_"#.utf8)) }
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(#"{"environment": "Sandbox"}"#.utf8)) }
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(#"{"status": "zero"}"#.utf8)) }
    }
}
