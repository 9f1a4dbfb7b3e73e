import AppStoreModels
import Foundation
import Hashing
import Reconciliation
import Testing
import TestSupport

/// Answers written as Apple writes them (string `*_ms` fields, `"true"` flags, the pending renewal
/// info's own keys, as in Tests/Fixtures/verify-responses), decoded by the real decoders.
enum AppleShaped {
    static func ms(_ days: Double) -> String { String(Build.day(days).milliseconds) }

    /// One `latest_receipt_info` / `in_app` entry.
    static func transaction(
        _ id: String, _ product: String, original: String, purchased: Double, expires: Double? = nil, cancelled: Double? = nil,
        upgraded: Bool = false, ownership: String = "PURCHASED"
    ) -> [String: Any] {
        var entry: [String: Any] = [
            "quantity": "1", "product_id": product, "transaction_id": id, "original_transaction_id": original,
            "purchase_date_ms": ms(purchased), "original_purchase_date_ms": ms(purchased), "is_trial_period": "false",
            "in_app_ownership_type": ownership,
        ]
        if let expires { entry["expires_date_ms"] = ms(expires) }
        if let cancelled {
            entry["cancellation_date_ms"] = ms(cancelled)
            entry["cancellation_reason"] = "0"
        }
        if upgraded { entry["is_upgraded"] = "true" }
        return entry
    }

    /// One `pending_renewal_info` entry; `original` nil leaves the key out, as some real answers do.
    static func renewal(
        original: String?, product: String, renewsTo: String? = nil, autoRenew: Bool = true, grace: Double? = nil, retrying: Bool = false
    ) -> [String: Any] {
        var entry: [String: Any] = [
            "product_id": product, "auto_renew_product_id": renewsTo ?? product, "auto_renew_status": autoRenew ? "1" : "0",
            "is_in_billing_retry_period": retrying ? "1" : "0",
        ]
        if let original { entry["original_transaction_id"] = original }
        if let grace { entry["grace_period_expires_date_ms"] = ms(grace) }
        if retrying { entry["expiration_intent"] = "2" }
        return entry
    }

    static func answer(
        id: Int64 = 1, latest: [[String: Any]], inApp: [[String: Any]] = [], pending: [[String: Any]] = [],
        environment: AppleEnvironment = .production
    ) throws -> VerifiedFacts {
        let body: [String: Any] = [
            "status": 0, "environment": environment.rawValue,
            "receipt": ["bundle_id": "com.example.app", "in_app": inApp, "receipt_type": "Production"],
            "latest_receipt_info": latest, "pending_renewal_info": pending, "latest_receipt": "MIIT",
        ]
        let response = try VerifyReceiptResponse.decode(Array(try JSONSerialization.data(withJSONObject: body)))
        return VerifiedFacts(receiptId: id, response: response, environment: environment)
    }

    /// The catalog of these tests: a group of two subscriptions, a 30-day pass and a one-time purchase.
    static let catalog: [String: Product] = [
        "pro.monthly": Product(productId: "pro.monthly", type: .autoRenewable),
        "pro.yearly": Product(productId: "pro.yearly", type: .autoRenewable),
        "premium": Product(productId: "premium", type: .autoRenewable),
        "basic": Product(productId: "basic", type: .autoRenewable),
        "season": Product(productId: "season", type: .nonRenewing, duration: CalendarDuration(days: 30)),
        "lifetime": Product(productId: "lifetime", type: .nonConsumable),
    ]

    static func decide(_ receipts: [VerifiedFacts], catalog: [String: Product] = catalog, sandbox: SandboxPolicy = .allow)
        -> [String: Entitlement]
    {
        let rules = EntitlementRules(catalog: catalog, sandboxPolicy: sandbox)
        return Dictionary(uniqueKeysWithValues: rules.entitlements(accountId: "acct", receipts: receipts, now: Build.now).map { ($0.productId, $0) })
    }
}

/// The edges of docs/guarantees.md, "Entitlement rules" (per chain, then per product), one row each,
/// on answers shaped like the real ones. Each row revoked a paying customer, or kept one who
/// left, before the rule.
@Suite struct ChainRulesTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var receipts: @Sendable () throws -> [VerifiedFacts]
        var product: String
        var state: EntitlementState
        var latestTransaction: String
        var expires: Double?
        var grace: Double?
        var testDescription: String { name }
    }

    /// Premium ended 10 days ago; basic took over at that renewal and is in its grace period.
    static func downgraded() throws -> VerifiedFacts {
        try AppleShaped.answer(
            latest: [
                AppleShaped.transaction("500", "premium", original: "500", purchased: -40, expires: -10),
                AppleShaped.transaction("501", "basic", original: "500", purchased: -10, expires: -1),
            ],
            pending: [AppleShaped.renewal(original: "500", product: "basic", grace: 5, retrying: true)])
    }

    static let cases: [Case] = [
        Case(name: "two chains of one product: the own renewing chain is not revoked by the family copy's revocation",
             receipts: {
                 [try AppleShaped.answer(
                     latest: [
                         AppleShaped.transaction("100", "pro.monthly", original: "100", purchased: -55, expires: -25),
                         AppleShaped.transaction("101", "pro.monthly", original: "100", purchased: -25, expires: 5),
                         // The organizer stopped sharing: the family copy, a later expiry, revoked yesterday.
                         AppleShaped.transaction("900", "pro.monthly", original: "900", purchased: -3, expires: 27, cancelled: -1,
                                                 ownership: "FAMILY_SHARED"),
                     ],
                     pending: [AppleShaped.renewal(original: "100", product: "pro.monthly"),
                               AppleShaped.renewal(original: "900", product: "pro.monthly", autoRenew: false)])]
             },
             product: "pro.monthly", state: .active, latestTransaction: "101", expires: 5),
        Case(name: "passes: a refunded later pass never ends the pass that covers today",
             receipts: {
                 [try AppleShaped.answer(latest: [], inApp: [
                     AppleShaped.transaction("300", "season", original: "300", purchased: -10),
                     AppleShaped.transaction("301", "season", original: "301", purchased: -5, cancelled: -4),
                 ])]
             },
             product: "season", state: .active, latestTransaction: "300", expires: 20),
        Case(name: "one Apple ID, two receipts: the same renewal entry without original_transaction_id is one entry",
             receipts: {
                 let entry = AppleShaped.renewal(original: nil, product: "pro.monthly", grace: 5, retrying: true)
                 let latest = [AppleShaped.transaction("200", "pro.monthly", original: "200", purchased: -32, expires: -2)]
                 return [try AppleShaped.answer(id: 1, latest: latest, pending: [entry]),
                         try AppleShaped.answer(id: 2, latest: latest, pending: [entry])]
             },
             product: "pro.monthly", state: .gracePeriod, latestTransaction: "200", expires: -2, grace: 5),
        Case(name: "upgraded away without a cancellation date: the old yearly ends",
             receipts: {
                 [try AppleShaped.answer(
                     latest: [
                         AppleShaped.transaction("400", "pro.yearly", original: "400", purchased: -65, expires: 300, upgraded: true),
                         AppleShaped.transaction("401", "premium", original: "400", purchased: -64, expires: -34, cancelled: -60),
                     ],
                     pending: [AppleShaped.renewal(original: "400", product: "premium", autoRenew: false)])]
             },
             product: "pro.yearly", state: .upgraded, latestTransaction: "400", expires: 300),
        Case(name: "downgrade at renewal: the product left is not granted the new one's grace period",
             receipts: { [try downgraded()] },
             product: "premium", state: .expired, latestTransaction: "500", expires: -10),
        Case(name: "downgrade at renewal: the product it renews keeps its grace period",
             receipts: { [try downgraded()] },
             product: "basic", state: .gracePeriod, latestTransaction: "501", expires: -1, grace: 5),
        Case(name: "a crossgrade back scheduled (auto_renew_product_id the product left): the product left gets no grace",
             receipts: {
                 [try AppleShaped.answer(
                     latest: [
                         AppleShaped.transaction("610", "pro.monthly", original: "610", purchased: -100, expires: -70),
                         AppleShaped.transaction("611", "pro.yearly", original: "610", purchased: -70, expires: -1),
                     ],
                     pending: [AppleShaped.renewal(original: "610", product: "pro.yearly", renewsTo: "pro.monthly", grace: 5, retrying: true)])]
             },
             product: "pro.monthly", state: .expired, latestTransaction: "610", expires: -70),
        Case(name: "a pending crossgrade (product_id the current one, renewing into another) still decides for the current one",
             receipts: {
                 [try AppleShaped.answer(
                     latest: [AppleShaped.transaction("600", "pro.monthly", original: "600", purchased: -31, expires: -1)],
                     pending: [AppleShaped.renewal(original: "600", product: "pro.monthly", renewsTo: "pro.yearly", grace: 3, retrying: true)])]
             },
             product: "pro.monthly", state: .gracePeriod, latestTransaction: "600", expires: -1, grace: 3),
    ]

    @Test(arguments: cases)
    func edges(_ test: Case) throws {
        let entitlement = try #require(AppleShaped.decide(try test.receipts())[test.product])
        #expect(entitlement.state == test.state)
        #expect(entitlement.latestTransactionId == test.latestTransaction)
        #expect(entitlement.expiresAt == test.expires.map(Build.day))
        #expect(entitlement.gracePeriodExpiresAt == test.grace.map(Build.day))
    }

    /// The Server API as the source: each transaction keeps its own signed environment. A
    /// production chain read after a sandbox one is production, and `--sandbox deny` keeps it.
    @Test func eachTransactionKeepsItsOwnEnvironment() throws {
        let sandboxChain = try SignedShaped.transaction("700", "pro.monthly", original: "700", purchased: -5, expires: 25, environment: "Sandbox")
        let productionChain = try SignedShaped.transaction("800", "lifetime", original: "800", purchased: -9, environment: "Production")
        // The account's environment is the first history's (the sandbox); the production purchase keeps its own.
        var facts = VerifiedFacts(receiptId: nil, signedTransactions: [sandboxChain, productionChain], renewalInfos: [], environment: .sandbox)
        #expect(facts.environment(ofTransaction: "800") == .production)
        #expect(AppleShaped.decide([facts])["lifetime"]?.environment == "Production")
        #expect(AppleShaped.decide([facts], sandbox: .deny)["lifetime"]?.entitled == true)
        #expect(AppleShaped.decide([facts], sandbox: .deny)["pro.monthly"] == nil)
        #expect(EntitlementRules.union([facts]).first { $0.transaction.transactionId == "800" }?.environment == .production)
        facts.transactionEnvironments = [:]  // what one environment for the whole answer did
        #expect(AppleShaped.decide([facts], sandbox: .deny)["lifetime"] == nil)
    }

    /// The best chain decides; a `refunded` row only when no chain grants and the deciding chain was refunded.
    @Test func theBestChainDecides() throws {
        let own = AppleShaped.transaction("1", "pro.monthly", original: "1", purchased: -40, expires: -10)
        let family = AppleShaped.transaction("2", "pro.monthly", original: "2", purchased: -20, expires: 10, cancelled: -2,
                                             ownership: "FAMILY_SHARED")
        // Neither grants: the chain with the later expiry decides, and it was revoked.
        let neither = try #require(AppleShaped.decide([try AppleShaped.answer(latest: [own, family])])["pro.monthly"])
        #expect(neither.state == .refunded && neither.originalTransactionId == "2")
        // The own chain in billing retry beats the revoked family chain.
        let retrying = try #require(AppleShaped.decide([try AppleShaped.answer(
            latest: [own, family], pending: [AppleShaped.renewal(original: "1", product: "pro.monthly", retrying: true)])])["pro.monthly"])
        #expect(retrying.state == .billingRetry && retrying.originalTransactionId == "1")
    }

    /// Where the catalog says so, a pass bought while another runs starts when that one ends.
    @Test func passesStackOnlyWhereTheCatalogSays() throws {
        let receipts = [try AppleShaped.answer(latest: [], inApp: [
            AppleShaped.transaction("1", "season", original: "1", purchased: -20),
            AppleShaped.transaction("2", "season", original: "2", purchased: -15),
            AppleShaped.transaction("3", "season", original: "3", purchased: -12, cancelled: -11),
        ])]
        #expect(AppleShaped.decide(receipts)["season"]?.expiresAt == Build.day(15))
        var catalog = AppleShaped.catalog
        catalog["season"]?.passesStack = true
        let stacked = try #require(AppleShaped.decide(receipts, catalog: catalog)["season"])
        #expect(stacked.expiresAt == Build.day(40))  // 10 + 30 days: the refunded pass adds nothing
        #expect(stacked.state == .active && stacked.latestTransactionId == "2")
    }

    /// A revoke after a grace period that ended minutes ago waits for the expiry lag, like an expiry.
    @Test func theEndOfAGracePeriodIsHeldByTheExpiryLag() {
        let inGrace = Entitlement(accountId: "a", productId: "pro.monthly", originalTransactionId: "1", latestTransactionId: "1",
                                  state: .gracePeriod, expiresAt: Build.day(-16), gracePeriodExpiresAt: Build.day(-0.5 / 24))
        var after = inGrace
        after.state = .billingRetry
        after.gracePeriodExpiresAt = nil
        let diff = EntitlementDiff(expiryLag: 3600)
        let held = diff.corrections(stored: [inGrace], computed: [after], now: Build.now)
        #expect(held.corrections.isEmpty && held.heldRevokes.count == 1)
        var longAgo = inGrace
        longAgo.gracePeriodExpiresAt = Build.day(-2.0 / 24)
        #expect(diff.corrections(stored: [longAgo], computed: [after], now: Build.now).corrections.map(\.kind) == [.revoke])
    }

    /// A grace period Apple's renewal entry says ended minutes ago is held too, when the stored
    /// row never knew of it (stored active): the rules say when it ended, the diff waits.
    @Test func aGraceEndAppleReportsIsHeldByTheExpiryLag() throws {
        let receipts = [try AppleShaped.answer(
            latest: [AppleShaped.transaction("1", "pro.monthly", original: "1", purchased: -46, expires: -16)],
            pending: [AppleShaped.renewal(original: "1", product: "pro.monthly", grace: -0.5 / 24, retrying: true)])]
        let rules = EntitlementRules(catalog: AppleShaped.catalog)
        let decision = rules.decide(accountId: "acct", receipts: receipts, union: EntitlementRules.union(receipts), now: Build.now)
        #expect(decision.entitlements.first?.state == .billingRetry)
        #expect(decision.lapsedGraceEnds["pro.monthly"] == Build.day(-0.5 / 24))
        let stored = Entitlement(accountId: "acct", productId: "pro.monthly", originalTransactionId: "1", latestTransactionId: "1",
                                 state: .active, expiresAt: Build.day(14))
        let plan = EntitlementDiff(expiryLag: 3600).corrections(stored: [stored], computed: decision.entitlements, now: Build.now,
                                                               lapsedGraceEnds: decision.lapsedGraceEnds)
        #expect(plan.corrections.isEmpty && plan.heldRevokes.count == 1)
    }
}

/// Signed payloads as the App Store Server API signs them, decoded by the real decoders (the
/// chain and signature are another suite's: these are the payloads after verification).
enum SignedShaped {
    static func transaction(
        _ id: String, _ product: String, original: String, purchased: Double, expires: Double? = nil, cancelled: Double? = nil,
        upgraded: Bool = false, ownership: String = "PURCHASED", environment: String = "Production", type: String? = nil
    ) throws -> JWSTransaction {
        var payload: [String: Any] = [
            "transactionId": id, "originalTransactionId": original, "productId": product, "bundleId": "com.example.app",
            "purchaseDate": Build.day(purchased).milliseconds, "originalPurchaseDate": Build.day(purchased).milliseconds,
            "quantity": 1, "inAppOwnershipType": ownership, "environment": environment, "signedDate": Build.now.milliseconds,
            "type": type ?? (expires != nil ? SignedProductType.autoRenewable.rawValue : SignedProductType.nonConsumable.rawValue),
        ]
        if let expires { payload["expiresDate"] = Build.day(expires).milliseconds }
        if let cancelled {
            payload["revocationDate"] = Build.day(cancelled).milliseconds
            payload["revocationReason"] = 0
        }
        if upgraded { payload["isUpgraded"] = true }
        return try JWSTransaction(json: Array(try JSONSerialization.data(withJSONObject: payload)))
    }

    static func renewal(original: String, product: String, renewsTo: String, autoRenew: Bool, grace: Double?, retrying: Bool,
                        environment: String = "Production") throws -> JWSRenewalInfo {
        var payload: [String: Any] = [
            "originalTransactionId": original, "productId": product, "autoRenewProductId": renewsTo, "autoRenewStatus": autoRenew ? 1 : 0,
            "isInBillingRetryPeriod": retrying, "environment": environment, "signedDate": Build.now.milliseconds,
        ]
        if let grace { payload["gracePeriodExpiresDate"] = Build.day(grace).milliseconds }
        if retrying { payload["expirationIntent"] = 2 }
        return try JWSRenewalInfo(json: Array(try JSONSerialization.data(withJSONObject: payload)))
    }
}
