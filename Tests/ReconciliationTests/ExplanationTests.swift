import AppStoreModels
import Foundation
import Reconciliation
import Testing
import TestSupport

/// `explain`'s decisions, pure: stored evidence in, the rules' decision, its reason and what the
/// next run would change out.
@Suite struct ExplanationTests {
    static let now = Date(ms: 1_790_000_000_000)
    static func at(days: Double) -> Date { now.addingTimeInterval(days * 86_400) }

    static func ledger(_ id: String, original: String = "1", product: String = "pro", purchased: Double, expires: Double?,
                       cancelled: Double? = nil, reason: Int? = nil, upgraded: Bool? = nil,
                       environment: AppleEnvironment = .production) -> AccountEvidence.LedgerTransaction {
        AccountEvidence.LedgerTransaction(
            transaction: Transaction(transactionId: id, originalTransactionId: original, productId: product, purchaseDate: at(days: purchased),
                                     expiresDate: expires.map(at(days:)), cancellationDate: cancelled.map(at(days:)),
                                     cancellationReason: reason, isUpgraded: upgraded),
            environment: environment, source: "verify_receipt")
    }

    /// A receipt whose last verification succeeded, or failed with `outcome`.
    static func receipt(_ id: Int64 = 1, outcome: String? = "verified", verified: Bool = true) -> AccountEvidence.Receipt {
        AccountEvidence.Receipt(id: id, environment: "Production", lastStatus: outcome == "verified" ? 0 : nil, lastOutcome: outcome,
                                lastVerifiedAt: verified ? at(days: -1) : nil, nextAttemptAt: nil, attempts: outcome == "verified" ? 0 : 1,
                                localBundleId: nil, localOriginalTransactionIds: nil)
    }

    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var ledger: [AccountEvidence.LedgerTransaction]
        var renewal: PendingRenewalInfo?
        var stored: EntitlementState?
        var sandbox: SandboxPolicy = .allow
        var state: EntitlementState?
        var why: String
        var next: Correction.Kind?
        var description: String { name }
    }

    static let cases: [Case] = [
        Case(name: "active, agrees", ledger: [ledger("1", purchased: -40, expires: -10), ledger("2", purchased: -10, expires: 20)],
             stored: .active, state: .active, why: "current transaction 2: the greatest expires_date of the 2 transaction(s) of chain 1"),
        Case(name: "refund, stored active", ledger: [ledger("1", purchased: -10, expires: 20, cancelled: -1, reason: 1)],
             stored: .active, state: .refunded, why: "(reason 1: an issue in the app), not an upgrade: refunded", next: .revoke),
        Case(name: "grace", ledger: [ledger("1", purchased: -31, expires: -1)],
             renewal: PendingRenewalInfo(originalTransactionId: "1", gracePeriodExpiresDate: at(days: 3)), stored: .active,
             state: .gracePeriod, why: "billing grace period until", next: .shorten),
        Case(name: "billing retry", ledger: [ledger("1", purchased: -32, expires: -2)],
             renewal: PendingRenewalInfo(originalTransactionId: "1", isInBillingRetryPeriod: true), stored: .active,
             state: .billingRetry, why: "Apple is still trying to bill", next: .revoke),
        Case(name: "expired without renewal info", ledger: [ledger("1", purchased: -32, expires: -2)], stored: nil,
             state: .expired, why: "no renewal info is stored for chain 1", next: .update),
        Case(name: "sandbox denied", ledger: [ledger("1", purchased: -1, expires: 29, environment: .sandbox)], stored: .active,
             sandbox: .deny, state: nil, why: "1 sandbox transaction(s) ignored (--sandbox deny)", next: .revoke),
        Case(name: "stored row with no transaction", ledger: [], stored: .active, state: nil,
             why: "no stored transaction of this product", next: .revoke),
    ]

    @Test(arguments: cases) func decisions(_ example: Case) throws {
        var evidence = AccountEvidence(accountId: "a", receipts: [Self.receipt()], ledger: example.ledger,
                                       renewals: example.renewal.map { [AccountEvidence.Renewal(environment: .production, info: $0)] } ?? [])
        if let stored = example.stored {
            evidence.entitlements = [Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", latestTransactionId: "2",
                                                 state: stored, expiresAt: Self.at(days: 20), environment: "Production")]
        }
        let decisions = Explanation.decisions(evidence, rules: EntitlementRules(sandboxPolicy: example.sandbox), diff: EntitlementDiff(),
                                              now: Self.now)
        let decision = try #require(decisions.first { $0.productId == "pro" })
        #expect(decision.decided?.state == example.state)
        #expect(decision.why.contains { $0.contains(example.why) }, "\(decision.why)")
        #expect(decision.nextRun?.kind == example.next, "\(String(describing: decision.nextRun))")
    }

    /// The expiry lag holds a revoke back, and the decision says so.
    @Test func aRevokeWithinTheExpiryLagWaits() throws {
        let evidence = AccountEvidence(
            accountId: "a", receipts: [Self.receipt()], ledger: [Self.ledger("1", purchased: -30, expires: -0.01)],
            entitlements: [Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", latestTransactionId: "1",
                                       state: .active, expiresAt: Self.at(days: -0.01), environment: "Production")])
        let decision = try #require(Explanation.decisions(evidence, rules: EntitlementRules(), diff: EntitlementDiff(expiryLag: 3600),
                                                          now: Self.now).first)
        #expect(decision.heldByExpiryLag)
        #expect(decision.nextRun?.kind == .revoke)
        #expect(decision.why.last?.contains("waits for a later run") == true)
    }

    /// docs/guarantees.md, "Entitlement rules": only an account all of whose receipts verified gets corrections. Any
    /// other standing shows no next-run change, however the stored row and the ledger differ.
    @Test(arguments: [
        ("verified", [receipt()], true),
        ("one receipt deferred", [receipt(1), receipt(2, outcome: "deferred", verified: false)], false),
        ("failed after verifying once", [receipt(1, outcome: "failed", verified: true)], false),
        ("foreign bundle", [receipt(1, outcome: "foreign_bundle", verified: false)], false),
        ("never sent", [receipt(1, outcome: nil, verified: false)], false),
        ("no receipt at all", [], false),
    ] as [(String, [AccountEvidence.Receipt], Bool)])
    func onlyAVerifiedAccountHasANextRunChange(name: String, receipts: [AccountEvidence.Receipt], corrects: Bool) throws {
        let evidence = AccountEvidence(
            accountId: "a", receipts: receipts, ledger: [Self.ledger("1", purchased: -10, expires: 20, cancelled: -1, reason: 1)],
            entitlements: [Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", latestTransactionId: "1",
                                       state: .active, expiresAt: Self.at(days: 20), environment: "Production"),
                           Entitlement(accountId: "a", productId: "gone", originalTransactionId: "9", state: .active,
                                       expiresAt: Self.at(days: 5), environment: "Production")])
        #expect(AccountStanding(receipts: receipts).allowsCorrections == corrects, "\(name)")
        let decisions = Explanation.decisions(evidence, rules: EntitlementRules(), diff: EntitlementDiff(), now: Self.now)
        #expect(decisions.map { $0.nextRun?.kind } == (corrects ? [.revoke, .revoke] : [nil, nil]), "\(name)")
        // A product with no transaction but a stored row that expires is a subscription, not a non-consumable.
        let gone = try #require(decisions.first { $0.productId == "gone" })
        #expect(gone.type == .autoRenewable && gone.typeFrom.hasPrefix("guessed from the stored row"), "\(name)")
        if !corrects { #expect(gone.why == ["no transaction of this product is stored: the account's receipts have not all verified, so nothing is known yet"]) }
    }

    /// The verdict reads the stored row (what the app grants now), each code in words. Texts written by hand.
    @Test(arguments: [
        ("active, auto-renew on", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", latestTransactionId: "1",
                                              state: .active, expiresAt: at(days: 3), autoRenew: true), [Ledger](), nil as Int?,
         true, "ACCESS until 2026-09-24 14:13 UTC (subscription active, auto-renew on)"),
        ("active, auto-renew off", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", state: .active,
                                               expiresAt: at(days: 3), autoRenew: false), [], nil,
         true, "ACCESS until 2026-09-24 14:13 UTC (subscription active, auto-renew off: it ends then)"),
        ("lifetime", Entitlement(accountId: "a", productId: "life", originalTransactionId: "1", state: .active), [], nil,
         true, "ACCESS with no expiry (a one-time purchase)"),
        ("stale active row", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", state: .active,
                                         expiresAt: at(days: -2)), [], nil,
         true, "ACCESS, though the stored expiry 2026-09-19 14:13 UTC has passed (stored as active; the next verification decides)"),
        ("grace", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", state: .gracePeriod, expiresAt: at(days: -1),
                              gracePeriodExpiresAt: at(days: 5)), [], nil,
         true, "ACCESS until 2026-09-26 14:13 UTC (billing grace period: the renewal due 2026-09-20 14:13 UTC failed, and Apple is retrying the payment)"),
        ("refunded, reason 0", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", latestTransactionId: "7",
                                           state: .refunded, expiresAt: at(days: 20), refundedAt: at(days: -4)),
         [ledger("7", purchased: -10, expires: 20, cancelled: -4, reason: 0)], nil,
         false, "NO ACCESS since 2026-09-17 14:13 UTC (refunded, reason 0: another reason)"),
        ("billing retry, intent 2", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", state: .billingRetry,
                                                expiresAt: at(days: -3)), [], 2,
         false, "NO ACCESS since 2026-09-18 14:13 UTC (billing retry: the renewal payment failed and Apple is still trying to bill; "
             + "expiration intent 2: a billing error)"),
        ("expired, intent 1", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", state: .expired,
                                          expiresAt: at(days: -3)), [], 1,
         false, "NO ACCESS since 2026-09-18 14:13 UTC (expired; expiration intent 1: the customer cancelled)"),
        ("expired, intent 3", Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", state: .expired,
                                          expiresAt: at(days: -3)), [], 3,
         false, "NO ACCESS since 2026-09-18 14:13 UTC (expired; expiration intent 3: the customer did not agree to a price increase)"),
    ] as [(String, Entitlement, [Ledger], Int?, Bool, String)])
    func verdicts(name: String, stored: Entitlement, ledger: [Ledger], intent: Int?, access: Bool, text: String) throws {
        let renewal = intent.map { PendingRenewalInfo(originalTransactionId: "1", expirationIntent: $0) }
        let evidence = AccountEvidence(accountId: "a", receipts: [Self.receipt()], ledger: ledger,
                                       renewals: renewal.map { [AccountEvidence.Renewal(environment: .production, info: $0)] } ?? [],
                                       entitlements: [stored])
        let decision = try #require(Explanation.decisions(evidence, rules: EntitlementRules(), diff: EntitlementDiff(), now: Self.now).first)
        #expect(decision.verdict == Verdict(hasAccess: access, text: text), "\(name)")
    }

    @Test func momentIsTheMinuteInUTC() {
        // 1,790,000,000 s after 1970 is 2026-09-21T14:13:20Z, the time the texts above are written from.
        #expect(Explanation.moment(Self.now) == "2026-09-21 14:13 UTC")
    }

    /// Two chains of one product: `explain` names the chain that decided and how the other was
    /// judged alone; a signed type read back from the ledger types a product the catalog lacks.
    @Test func explainNamesTheDecidingChain() throws {
        var family = Self.ledger("9", original: "9", purchased: -3, expires: 27, cancelled: -1, reason: 0)
        family.transaction.inAppOwnershipType = "FAMILY_SHARED"
        let evidence = AccountEvidence(accountId: "a", receipts: [Self.receipt()],
                                       ledger: [Self.ledger("1", purchased: -25, expires: 5), family])
        let decision = try #require(Explanation.decisions(evidence, rules: EntitlementRules(), diff: EntitlementDiff(), now: Self.now).first)
        #expect(decision.decided?.state == .active)
        #expect(decision.why.first == "decided by chain 1 (active), the best of 2 chains judged alone", "\(decision.why)")
        #expect(decision.why.contains { $0.hasPrefix("  chain 9: refunded, expiry ") && $0.hasSuffix(", family shared") }, "\(decision.why)")

        var signed = Self.ledger("5", original: "5", product: "coins", purchased: -2, expires: nil)
        #expect(Explanation.decisions(AccountEvidence(accountId: "a", receipts: [Self.receipt()], ledger: [signed]), rules: EntitlementRules(),
                                      diff: EntitlementDiff(), now: Self.now).first?.decided == nil)
        signed.rawSignedProductType = SignedProductType.nonConsumable.rawValue
        let typed = try #require(Explanation.decisions(AccountEvidence(accountId: "a", receipts: [Self.receipt()], ledger: [signed]),
                                                       rules: EntitlementRules(), diff: EntitlementDiff(), now: Self.now).first)
        #expect(typed.decided?.state == .active && typed.typeFrom == "Apple's signed type")
    }
}

typealias Ledger = AccountEvidence.LedgerTransaction
