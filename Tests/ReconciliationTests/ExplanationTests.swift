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
             stored: .active, state: .active, why: "current transaction 2: the greatest expires_date of the product's 2 transaction(s) in 1 chain(s)"),
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
        var evidence = AccountEvidence(accountId: "a", ledger: example.ledger,
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
            accountId: "a", ledger: [Self.ledger("1", purchased: -30, expires: -0.01)],
            entitlements: [Entitlement(accountId: "a", productId: "pro", originalTransactionId: "1", latestTransactionId: "1",
                                       state: .active, expiresAt: Self.at(days: -0.01), environment: "Production")])
        let decision = try #require(Explanation.decisions(evidence, rules: EntitlementRules(), diff: EntitlementDiff(expiryLag: 3600),
                                                          now: Self.now).first)
        #expect(decision.heldByExpiryLag)
        #expect(decision.nextRun?.kind == .revoke)
        #expect(decision.why.last?.contains("waits for a later run") == true)
    }
}
