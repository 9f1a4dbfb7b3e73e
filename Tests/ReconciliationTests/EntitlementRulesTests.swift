import AppStoreModels
import Foundation
import Reconciliation
import Testing
import TestSupport

/// Builders for table tests: times in days from `now`.
enum Build {
    static let now = Date(ms: 1_800_000_000_000)

    static func day(_ offset: Double) -> Date { now.addingTimeInterval(offset * 86_400) }

    static func tx(
        _ id: String, _ product: String = "pro.monthly", original: String? = nil, purchased: Double = -30,
        expires: Double? = nil, cancelled: Double? = nil, reason: Int? = nil, upgraded: Bool? = nil,
        ownership: String? = "PURCHASED"
    ) -> Transaction {
        Transaction(
            transactionId: id, originalTransactionId: original ?? id, productId: product, purchaseDate: day(purchased),
            expiresDate: expires.map(day), cancellationDate: cancelled.map(day), cancellationReason: reason,
            isUpgraded: upgraded, inAppOwnershipType: ownership)
    }

    static func receipt(
        id: Int64 = 1, latest: [Transaction] = [], inApp: [Transaction] = [], pending: [PendingRenewalInfo] = [],
        environment: AppleEnvironment = .production
    ) -> VerifiedFacts {
        VerifiedFacts(
            receiptId: id,
            response: VerifyReceiptResponse(
                status: 0, environment: environment.rawValue, receipt: Receipt(bundleId: "com.example", inApp: inApp),
                latestReceiptInfo: latest, pendingRenewalInfo: pending),
            environment: environment)
    }

    static func entitlements(_ receipts: [VerifiedFacts], catalog: [Product] = [], sandbox: SandboxPolicy = .allow) -> [String: Entitlement] {
        let rules = EntitlementRules(catalog: Dictionary(uniqueKeysWithValues: catalog.map { ($0.productId, $0) }), sandboxPolicy: sandbox)
        return Dictionary(uniqueKeysWithValues: rules.entitlements(accountId: "acct", receipts: receipts, now: now).map { ($0.productId, $0) })
    }
}

@Suite struct EntitlementRulesTests {
    struct StateCase: Sendable, CustomTestStringConvertible {
        var name: String
        var latest: [Transaction]
        var pending: [PendingRenewalInfo] = []
        var state: EntitlementState
        var expires: Date?
        var latestTransaction: String
        var testDescription: String { name }
    }

    static let stateCases: [StateCase] = [
        .init(name: "active: expiry in the future",
              latest: [Build.tx("1", expires: -20), Build.tx("2", original: "1", purchased: -20, expires: 10)],
              state: .active, expires: Build.day(10), latestTransaction: "2"),
        .init(name: "expired",
              latest: [Build.tx("1", expires: -20), Build.tx("2", original: "1", purchased: -20, expires: -2)],
              pending: [PendingRenewalInfo(originalTransactionId: "1", autoRenewStatus: false, isInBillingRetryPeriod: false)],
              state: .expired, expires: Build.day(-2), latestTransaction: "2"),
        .init(name: "grace period: grace in the future",
              latest: [Build.tx("1", expires: -1)],
              pending: [PendingRenewalInfo(originalTransactionId: "1", gracePeriodExpiresDate: Build.day(5), isInBillingRetryPeriod: true)],
              state: .gracePeriod, expires: Build.day(-1), latestTransaction: "1"),
        .init(name: "billing retry: grace already over",
              latest: [Build.tx("1", expires: -10)],
              pending: [PendingRenewalInfo(originalTransactionId: "1", gracePeriodExpiresDate: Build.day(-4), isInBillingRetryPeriod: true)],
              state: .billingRetry, expires: Build.day(-10), latestTransaction: "1"),
        .init(name: "refunded: cancelled, not an upgrade",
              latest: [Build.tx("1", expires: 20, cancelled: -1, reason: 1)],
              state: .refunded, expires: Build.day(20), latestTransaction: "1"),
        .init(name: "upgraded: cancelled with is_upgraded",
              latest: [Build.tx("1", expires: 20, cancelled: -1, upgraded: true)],
              state: .upgraded, expires: Build.day(20), latestTransaction: "1"),
        .init(name: "an old refund does not touch a later renewal",
              latest: [Build.tx("1", expires: -20, cancelled: -25), Build.tx("2", original: "1", purchased: -20, expires: 10)],
              state: .active, expires: Build.day(10), latestTransaction: "2"),
        .init(name: "current is the greatest expiry, not the last element",
              latest: [Build.tx("3", original: "1", purchased: -10, expires: 20), Build.tx("1", expires: -20),
                       Build.tx("2", original: "1", purchased: -20, expires: -10)],
              state: .active, expires: Build.day(20), latestTransaction: "3"),
    ]

    @Test(arguments: stateCases)
    func autoRenewableStates(_ test: StateCase) throws {
        let entitlement = try #require(Build.entitlements([Build.receipt(latest: test.latest, pending: test.pending)])["pro.monthly"])
        #expect(entitlement.state == test.state)
        #expect(entitlement.entitled == (test.state == .active || test.state == .gracePeriod))
        #expect(entitlement.expiresAt == test.expires)
        #expect(entitlement.latestTransactionId == test.latestTransaction)
        #expect(entitlement.originalTransactionId == "1")
        #expect(entitlement.refundedAt == (test.state == .refunded ? Build.day(-1) : nil))
        #expect(entitlement.gracePeriodExpiresAt == (test.state == .gracePeriod ? Build.day(5) : nil))
    }

    @Test func unionPrefersLatestReceiptInfoThenTheLaterExpiry() {
        let stale = Build.tx("9", expires: -1)
        let fresh = Build.tx("9", expires: 30)
        let receipts = [
            Build.receipt(id: 1, inApp: [fresh]),  // in_app says 30 days...
            Build.receipt(id: 2, latest: [stale]),  // ...but latest_receipt_info wins
            Build.receipt(id: 3, latest: [Build.tx("7", expires: 1)]),
            Build.receipt(id: 4, latest: [Build.tx("7", expires: 5)]),
        ]
        let union = EntitlementRules.union(receipts)
        #expect(union.count == 2)
        #expect(union.first { $0.transaction.transactionId == "9" }?.transaction.expiresDate == Build.day(-1))
        #expect(union.first { $0.transaction.transactionId == "7" }?.transaction.expiresDate == Build.day(5))
    }

    @Test func severalReceiptsOfOneAccountAreOneUnion() throws {
        let receipts = [
            Build.receipt(id: 1, latest: [Build.tx("1", expires: -20)]),
            Build.receipt(id: 2, latest: [Build.tx("1", expires: -20), Build.tx("2", original: "1", purchased: -20, expires: 10)]),
        ]
        let entitlement = try #require(Build.entitlements(receipts)["pro.monthly"])
        #expect(entitlement.state == .active)
        #expect(entitlement.latestTransactionId == "2")
    }

    @Test func nonConsumableActiveThenRefunded() throws {
        let catalog = [Product(productId: "lifetime", type: .nonConsumable)]
        let bought = Build.entitlements([Build.receipt(inApp: [Build.tx("5", "lifetime")])], catalog: catalog)
        #expect(bought["lifetime"]?.state == .active)
        #expect(bought["lifetime"]?.expiresAt == nil)
        let refunded = Build.entitlements([Build.receipt(inApp: [Build.tx("5", "lifetime", cancelled: -2, reason: 0)])], catalog: catalog)
        #expect(refunded["lifetime"]?.state == .refunded)
        #expect(refunded["lifetime"]?.refundedAt == Build.day(-2))
        let rebought = Build.entitlements([Build.receipt(inApp: [
            Build.tx("5", "lifetime", purchased: -30, cancelled: -20), Build.tx("6", "lifetime", purchased: -10),
        ])], catalog: catalog)
        #expect(rebought["lifetime"]?.state == .active)
        #expect(rebought["lifetime"]?.latestTransactionId == "6")
    }

    /// A product neither the catalog nor Apple's signed type types is left as stored: never
    /// lifetime access from a guess (docs/guarantees.md, "Entitlement rules").
    @Test func consumablesGrantNothingAndAnUntypedProductIsLeftAsStored() throws {
        let catalog = [Product(productId: "coins", type: .consumable)]
        #expect(Build.entitlements([Build.receipt(inApp: [Build.tx("8", "coins")])], catalog: catalog).isEmpty)
        let receipts = [Build.receipt(inApp: [Build.tx("8", "coins")])]
        let decision = EntitlementRules().decide(accountId: "acct", receipts: receipts, union: EntitlementRules.union(receipts), now: Build.now)
        #expect(decision.entitlements.isEmpty)
        #expect(decision.leftAsStored.keys.sorted() == ["coins"])
        // Apple's signed type says what it is, and wins over the catalog.
        var signed = VerifiedFacts(receiptId: nil, transactions: [Build.tx("8", "coins")], renewals: [], environment: .production, source: .serverAPI)
        signed.signedTerms["8"] = SignedTerms(rawProductType: SignedProductType.nonConsumable.rawValue)
        #expect(Build.entitlements([signed])["coins"]?.state == .active)
        #expect(Build.entitlements([signed], catalog: catalog)["coins"]?.state == .active)
        // A pass the catalog gives no duration is left as stored too.
        let unjudged = EntitlementRules(catalog: ["coins": Product(productId: "coins", type: .nonRenewing)]).decide(
            accountId: "acct", receipts: receipts, union: EntitlementRules.union(receipts), now: Build.now)
        #expect(unjudged.entitlements.isEmpty && unjudged.leftAsStored["coins"] != nil)
        // Every purchase of it refunded: a refund ends a purchase whatever its type.
        let refundedReceipts = [Build.receipt(inApp: [Build.tx("8", "coins", cancelled: -1)])]
        let refunded = EntitlementRules().decide(accountId: "acct", receipts: refundedReceipts,
                                                 union: EntitlementRules.union(refundedReceipts), now: Build.now)
        #expect(refunded.leftAsStored.isEmpty && refunded.entitlements.first?.state == .refunded)
        // And the diff neither grants nor revokes what is left as stored.
        let stored = Entitlement(accountId: "acct", productId: "coins", originalTransactionId: "8", state: .active)
        #expect(EntitlementDiff().corrections(stored: [stored], computed: [], now: Build.now, leftAsStored: ["coins"]).corrections.isEmpty)
        #expect(EntitlementDiff().corrections(stored: [stored], computed: [], now: Build.now).corrections.map(\.kind) == [.revoke])
    }

    @Test func nonRenewingExpiresAfterTheCatalogDuration() throws {
        let catalog = [Product(productId: "season", type: .nonRenewing, duration: CalendarDuration(months: 1))]
        let running = try #require(Build.entitlements([Build.receipt(inApp: [Build.tx("4", "season", purchased: -10)])], catalog: catalog)["season"])
        #expect(running.state == .active)
        #expect(running.expiresAt == CalendarDuration(months: 1).added(to: Build.day(-10)))
        let over = try #require(Build.entitlements([Build.receipt(inApp: [Build.tx("4", "season", purchased: -40)])], catalog: catalog)["season"])
        #expect(over.state == .expired)
        #expect(CalendarDuration(months: 1).added(to: Date(ms: 1_706_659_200_000)) == Date(ms: 1_709_164_800_000))  // Jan 31 -> Feb 29 2024
    }

    /// A pass bought again is judged by the purchase that lasts longest, the latest: the first one
    /// ran out long ago (issue 45: judging by the first left every test green, and revoked the
    /// customer who bought again).
    @Test func aPassBoughtAgainIsJudgedByItsLatestPurchase() throws {
        let catalog = [Product(productId: "season", type: .nonRenewing, duration: CalendarDuration(months: 1))]
        let receipts = [Build.receipt(inApp: [Build.tx("4", "season", purchased: -400), Build.tx("5", "season", purchased: -10)])]
        let pass = try #require(Build.entitlements(receipts, catalog: catalog)["season"])
        #expect(pass.state == .active)
        #expect(pass.latestTransactionId == "5")
        #expect(pass.expiresAt == CalendarDuration(months: 1).added(to: Build.day(-10)))
        // In either order of the receipt.
        let reversed = [Build.receipt(inApp: [Build.tx("5", "season", purchased: -10), Build.tx("4", "season", purchased: -400)])]
        #expect(Build.entitlements(reversed, catalog: catalog)["season"]?.latestTransactionId == "5")
    }

    @Test func catalogTypeWinsOverTheExpiryGuess() {
        let catalog = [Product(productId: "pro.monthly", type: .nonConsumable)]
        let entitlements = Build.entitlements([Build.receipt(latest: [Build.tx("1", expires: -5)])], catalog: catalog)
        #expect(entitlements["pro.monthly"]?.state == .active)
        #expect(entitlements["pro.monthly"]?.expiresAt == nil)
    }

    @Test func sandboxGrantsUnlessDenied() {
        let sandbox = Build.receipt(latest: [Build.tx("1", expires: 10)], environment: .sandbox)
        #expect(Build.entitlements([sandbox])["pro.monthly"]?.environment == "Sandbox")
        #expect(Build.entitlements([sandbox])["pro.monthly"]?.entitled == true)
        #expect(Build.entitlements([sandbox], sandbox: .deny).isEmpty)
    }

    @Test func renewalInfoComesFromTheCurrentChain() throws {
        let receipts = [Build.receipt(
            latest: [Build.tx("1", expires: 10), Build.tx("50", original: "50", purchased: -60, expires: -30)],
            pending: [
                PendingRenewalInfo(originalTransactionId: "50", autoRenewProductId: "other", autoRenewStatus: false),
                PendingRenewalInfo(originalTransactionId: "1", autoRenewProductId: "pro.yearly", autoRenewStatus: true),
            ])]
        let entitlement = try #require(Build.entitlements(receipts)["pro.monthly"])
        #expect(entitlement.autoRenew == true)
        #expect(entitlement.autoRenewProductId == "pro.yearly")
        #expect(entitlement.originalTransactionId == "1")
    }
}

/// The rules over real answers from Tests/Fixtures.
@Suite struct EntitlementRulesFixtureTests {
    static func receipt(_ file: String) throws -> VerifiedFacts {
        let response = try VerifyReceiptResponse.decode(Fixtures.bytes("verify-responses/\(file)"))
        return VerifiedFacts(receiptId: 1, response: response, environment: AppleEnvironment(appleName: response.environment) ?? .production)
    }

    static func rules() -> EntitlementRules {
        EntitlementRules(catalog: ["com.sumiapp.GridDiary.pro": Product(productId: "com.sumiapp.GridDiary.pro", type: .nonConsumable)])
    }

    /// 14 periods in `in_app` whose greatest expiry is at index 13 of 15: neither first nor last.
    @Test func linjunpopGreatestExpiryInTheMiddle() throws {
        let receipt = try Self.receipt("linjunpop-receipt_verifier-auto_renewable_receipt.json")
        let entitlements = Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_478_670_000_000))
        let subscription = try #require(entitlements.first { $0.productId == "com.sumiapp.GridDiary.pro.subscription" })
        #expect(subscription.latestTransactionId == "1000000248916093")
        #expect(subscription.expiresAt == Date(ms: 1_478_676_892_000))
        #expect(subscription.state == .active)
        #expect(subscription.originalTransactionId == "1000000248850692")
        let lifetime = try #require(entitlements.first { $0.productId == "com.sumiapp.GridDiary.pro" })
        #expect(lifetime.state == .active)
        #expect(lifetime.expiresAt == nil)
        // A day later the same answer means expired (no renewal info: not in billing retry).
        let later = Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_478_770_000_000))
        #expect(later.first { $0.productId == "com.sumiapp.GridDiary.pro.subscription" }?.state == .expired)
    }

    /// 54 transactions sorted newest first; four of the yearly ones carry is_upgraded.
    @Test func notificationNewestFirstWithUpgrades() throws {
        let object = try JSONSerialization.jsonObject(with: Fixtures.data("notifications/imdhemy-server-notification-DID_CHANGE_RENEWAL_STATUS.json")) as? [String: Any]
        let unified = try VerifyReceiptResponse.decode(Array(JSONSerialization.data(withJSONObject: object!["unified_receipt"]!)))
        let receipt = VerifiedFacts(receiptId: 1, response: unified, environment: .production)
        let entitlements = Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_606_000_000_000))
        let monthly = try #require(entitlements.first { $0.productId == "one_month_subscription" })
        #expect(monthly.latestTransactionId == "1000000746095599")
        #expect(monthly.state == .active)
        #expect(monthly.autoRenew == false)
        let yearly = try #require(entitlements.first { $0.productId == "one_year_subscription" })
        #expect(yearly.entitled == false)
    }

    @Test func itunesIAPLastElementIsCurrent() throws {
        let receipt = try Self.receipt("itunesiap-autorenew-response2-sandbox-status0.json")
        let entitlements = Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_500_975_000_000))
        let entitlement = try #require(entitlements.first { $0.productId == "testproduct" })
        #expect(entitlement.latestTransactionId == "1000000318420598")
        #expect(entitlement.expiresAt == Date(ms: 1_500_975_210_000))
        #expect(entitlement.state == .active)
        #expect(entitlement.environment == "Sandbox")
        // Renewal info without original_transaction_id is matched by product.
        #expect(entitlement.autoRenew == false)
    }

    @Test func monzaRefund() throws {
        let receipt = try Self.receipt("gabrielgarza-monza-cancellation_response.json")
        let entitlement = try #require(Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_466_000_000_000)).first)
        #expect(entitlement.state == .refunded)
        #expect(entitlement.refundedAt == Date(ms: 1_466_127_848_000))  // from _ms, not the disagreeing string
        #expect(entitlement.entitled == false)
    }

    @Test func mozillaRefundReasonZero() throws {
        let receipt = try Self.receipt("mozilla-bigquery-etl-parse_apple_receipt.json")
        let entitlement = try #require(Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_610_070_100_000)).first)
        #expect(entitlement.state == .refunded)
        #expect(entitlement.refundedAt == Date(ms: 1_610_071_836_000))
        let plan = EntitlementDiff().corrections(stored: [], computed: [entitlement], now: Date(ms: 1_610_070_100_000),
                                                  cancellationReasons: EntitlementRules.cancellationReasons([receipt]))
        #expect(plan.corrections.first?.reason == "refund on 2021-01-08, reason 0 (no entitlement was stored)")
    }

    /// One product, two chains (a family-shared one and a purchase): the greatest expiry decides.
    @Test func familySharedTwoChains() throws {
        let receipt = try Self.receipt("alexalok-AppleReceiptVerifier.NET-Valid_Production_Family_Shared.json")
        let entitlement = try #require(Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_637_000_000_000)).first)
        #expect(entitlement.latestTransactionId == "540000823485156")
        #expect(entitlement.ownershipType == "FAMILY_SHARED")
        #expect(entitlement.state == .active)
        #expect(entitlement.autoRenew == false)
    }

    @Test func sandboxConsumableBesideASubscription() throws {
        let receipt = try Self.receipt("alexalok-AppleReceiptVerifier.NET-Valid_Sandbox_Consumable_And_Active_Subscription_Excluding_Old_Transactions.json")
        let catalog = [Product(productId: "com.test.app.mercury", type: .consumable)]
        let rules = EntitlementRules(catalog: Dictionary(uniqueKeysWithValues: catalog.map { ($0.productId, $0) }))
        let entitlements = rules.entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_608_230_000_000))
        #expect(entitlements.map(\.productId) == ["com.test.app.mars"])
        #expect(entitlements.first?.latestTransactionId == "1000000755926609")
        #expect(entitlements.first?.environment == "Sandbox")
    }

    @Test func billingErrorIntentWithoutRetryIsExpired() throws {
        let receipt = try Self.receipt("linjunpop-receipt_verifier-exclude_old_transactions_false.json")
        let entitlement = try #require(Self.rules().entitlements(accountId: "a", receipts: [receipt], now: Date(ms: 1_500_000_000_000)).first)
        #expect(entitlement.state == .expired)
        #expect(entitlement.latestTransactionId == "110000284493242")
    }
}
