import Foundation
import Reconciliation
import Testing

@Suite struct EntitlementDiffTests {
    static let now = Build.now

    static func row(_ state: EntitlementState, expires: Double? = nil, product: String = "pro.monthly",
                    latest: String = "1", autoRenew: Bool? = true) -> Entitlement {
        Entitlement(accountId: "acct", productId: product, originalTransactionId: "1", latestTransactionId: latest,
                    state: state, expiresAt: expires.map(Build.day), autoRenew: autoRenew, environment: "Production",
                    ownershipType: "PURCHASED", refundedAt: state == .refunded ? Build.day(-1) : nil)
    }

    struct KindCase: Sendable, CustomTestStringConvertible {
        var name: String
        var before: Entitlement?
        var after: Entitlement
        var kind: Correction.Kind?
        var reason: String?
        var isFirstNight = false
        var testDescription: String { name }
    }

    static let kindCases: [KindCase] = [
        .init(name: "no row, now active: grant", before: nil, after: row(.active, expires: 10), kind: .grant,
              reason: "purchase found: expires 2027-01-25"),
        .init(name: "expired, now active: grant", before: row(.expired, expires: -5), after: row(.active, expires: 25, latest: "2"),
              kind: .grant, reason: "entitled again (was expired): expires 2027-02-09"),
        .init(name: "active, now refunded: revoke", before: row(.active, expires: 10), after: row(.refunded, expires: 10),
              kind: .revoke, reason: "refund on 2027-01-14"),
        .init(name: "active, expired long ago: revoke", before: row(.active, expires: -3), after: row(.expired, expires: -3, autoRenew: false),
              kind: .revoke, reason: "expired on 2027-01-12; auto-renew is off"),
        .init(name: "renewed: extend", before: row(.active, expires: 2), after: row(.active, expires: 32, latest: "2"),
              kind: .extend, reason: "renewed: expiry 2027-01-17 -> 2027-02-16"),
        .init(name: "expiry moved earlier: shorten", before: row(.active, expires: 32), after: row(.active, expires: 2),
              kind: .shorten, reason: "expiry moved earlier: 2027-02-16 -> 2027-01-17"),
        .init(name: "auto-renew switched off: update", before: row(.active, expires: 10), after: row(.active, expires: 10, autoRenew: false),
              kind: .update, reason: "details changed: auto_renew true -> false"),
        .init(name: "no row, expired long ago: update", before: nil, after: row(.expired, expires: -30), kind: .update,
              reason: "expired on 2026-12-16 (no entitlement was stored)"),
        // On a first night, before the app's access was imported, no row is not "not entitled":
        // the app may have given access from its own table.
        .init(name: "first night, no row, expired long ago: revoke", before: nil, after: row(.expired, expires: -30), kind: .revoke,
              reason: "expired on 2026-12-16 (no entitlement was stored)", isFirstNight: true),
        .init(name: "first night, no row, refunded: revoke", before: nil, after: row(.refunded, expires: 10), kind: .revoke,
              reason: "refund on 2027-01-14 (no entitlement was stored)", isFirstNight: true),
        .init(name: "first night, no row, active: grant", before: nil, after: row(.active, expires: 10), kind: .grant,
              reason: "purchase found: expires 2027-01-25", isFirstNight: true),
        .init(name: "expired, still expired with auto-renew off: update", before: row(.expired, expires: -30),
              after: row(.expired, expires: -30, autoRenew: false), kind: .update, reason: "expired on 2026-12-16; auto-renew is off"),
        .init(name: "active to grace period: update", before: row(.active, expires: 10),
              after: { var e = row(.gracePeriod, expires: 10); e.gracePeriodExpiresAt = Build.day(16); return e }(),
              kind: .update, reason: "billing grace period until 2027-01-31"),
        .init(name: "unchanged: nothing", before: row(.active, expires: 10), after: row(.active, expires: 10), kind: nil, reason: nil),
        .init(name: "lifetime to dated: shorten", before: row(.active), after: row(.active, expires: 10), kind: .shorten,
              reason: "expiry moved earlier: never -> 2027-01-25"),
    ]

    @Test(arguments: kindCases)
    func kinds(_ test: KindCase) {
        let plan = EntitlementDiff(isFirstNight: test.isFirstNight).corrections(stored: test.before.map { [$0] } ?? [], computed: [test.after], now: Self.now)
        #expect(plan.corrections.first?.kind == test.kind)
        #expect(plan.corrections.count == (test.kind == nil ? 0 : 1))
        #expect(plan.corrections.first?.reason == test.reason)
        if test.kind != nil { #expect(plan.corrections.first?.before == test.before) }
    }

    @Test func storedEntitlementWithoutSupportIsRevoked() throws {
        let orphan = Self.row(.active, expires: 100, product: "ghost")
        let notEntitled = Self.row(.expired, expires: -100, product: "old")
        let plan = EntitlementDiff().corrections(stored: [orphan, notEntitled], computed: [], now: Self.now)
        #expect(plan.corrections.count == 1)
        let correction = try #require(plan.corrections.first)
        #expect(correction.kind == .revoke)
        #expect(correction.productId == "ghost")
        #expect(correction.after.entitled == false)
        #expect(correction.reason.contains("no transaction"))
    }

    @Test func expiryLagHoldsRecentExpiryRevokes() {
        let diff = EntitlementDiff(expiryLag: 3600)
        let before = Self.row(.active, expires: 10)
        let justExpired = Self.row(.expired, expires: -0.5 / 24)  // 30 minutes ago
        let held = diff.corrections(stored: [before], computed: [justExpired], now: Self.now)
        #expect(held.corrections.isEmpty)
        #expect(held.heldRevokes.count == 1)
        let longExpired = Self.row(.expired, expires: -2.0 / 24)  // 2 hours ago
        #expect(diff.corrections(stored: [before], computed: [longExpired], now: Self.now).corrections.map(\.kind) == [.revoke])
        // A refund is never held, however recent.
        let refunded = Self.row(.refunded, expires: -0.5 / 24)
        #expect(diff.corrections(stored: [before], computed: [refunded], now: Self.now).corrections.map(\.kind) == [.revoke])
    }

    /// A revoke for billing retry waits for the expiry lag as one for expiry does: Apple may still
    /// collect within the hour (issue 45: dropping `.billingRetry` from the guard left every test green).
    @Test func expiryLagHoldsARecentBillingRetryRevokeToo() {
        let diff = EntitlementDiff(expiryLag: 3600)
        let before = Self.row(.active, expires: 10)
        let retrying = Self.row(.billingRetry, expires: -0.5 / 24)  // expired 30 minutes ago, Apple retrying
        let held = diff.corrections(stored: [before], computed: [retrying], now: Self.now)
        #expect(held.corrections.isEmpty)
        #expect(held.heldRevokes.count == 1)
        let longRetrying = Self.row(.billingRetry, expires: -2.0 / 24)
        #expect(diff.corrections(stored: [before], computed: [longRetrying], now: Self.now).corrections.map(\.kind) == [.revoke])
    }

    @Test func secondPassOverTheSameAnswerChangesNothing() {
        let receipts = [Build.receipt(latest: [Build.tx("1", expires: -20), Build.tx("2", original: "1", purchased: -20, expires: 10)],
                                      inApp: [Build.tx("9", "lifetime")])]
        let rules = EntitlementRules(catalog: ["lifetime": Product(productId: "lifetime", type: .nonConsumable)])
        let computed = rules.entitlements(accountId: "acct", receipts: receipts, now: Self.now)
        let first = EntitlementDiff().corrections(stored: [], computed: computed, now: Self.now)
        #expect(first.corrections.map(\.kind) == [.grant, .grant])
        let stored = first.corrections.map(\.after)
        #expect(EntitlementDiff().corrections(stored: stored, computed: computed, now: Self.now).corrections.isEmpty)
    }
}
