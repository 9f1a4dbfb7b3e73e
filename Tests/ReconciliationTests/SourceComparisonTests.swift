import AppStoreModels
import CivilCalendar
import Foundation
import Reconciliation
import Testing
import TestSupport

/// Where verifyReceipt and the Server API disagree, as pure table tests.
@Suite struct SourceComparisonTests {
    static func verifyReceipt(_ transactions: [Transaction]) -> [VerifiedFacts] {
        [VerifiedFacts(receiptId: 1, transactions: transactions, renewals: [], environment: .production, source: .verifyReceipt)]
    }

    static func serverAPI(_ transactions: [Transaction], consumables: Set<String> = []) -> [VerifiedFacts] {
        var facts = VerifiedFacts(receiptId: nil, transactions: transactions, renewals: [], environment: .production, source: .serverAPI)
        for transaction in transactions where consumables.contains(transaction.productId) {
            facts.signedTerms[transaction.transactionId] = SignedTerms(rawProductType: SignedProductType.consumable.rawValue)
        }
        return [facts]
    }

    static func kinds(_ left: [Transaction], _ right: [Transaction], consumables: Set<String> = []) -> [Disagreement.Kind] {
        SourceComparison.disagreements(
            accountId: "a", verifyReceipt: verifyReceipt(left), serverAPI: serverAPI(right, consumables: consumables),
            rules: EntitlementRules(), now: Build.now
        ).map(\.kind)
    }

    @Test func theSameFactsAgree() {
        let chain = [Build.tx("1", purchased: -40, expires: -10), Build.tx("2", original: "1", purchased: -10, expires: 20)]
        #expect(Self.kinds(chain, chain).isEmpty)
    }

    @Test func aRenewalOnlyTheAPIKnowsChangesTheStateToo() {
        let old = [Build.tx("1", purchased: -40, expires: -10)]
        let renewed = old + [Build.tx("2", original: "1", purchased: -10, expires: 20)]
        #expect(Self.kinds(old, renewed) == [.onlyInServerAPI, .state])
        #expect(Self.kinds(renewed, old) == [.onlyInVerifyReceipt, .state])
    }

    @Test func aRefundOnlyOneSourceKnows() {
        let active = [Build.tx("1", purchased: -10, expires: 20)]
        let refunded = [Build.tx("1", purchased: -10, expires: 20, cancelled: -1, reason: 1)]
        #expect(Self.kinds(active, refunded) == [.refundOnlyInServerAPI, .state])
        #expect(Self.kinds(refunded, active) == [.refundOnlyInVerifyReceipt, .state])
        let rows = SourceComparison.disagreements(
            accountId: "a", verifyReceipt: Self.verifyReceipt(active), serverAPI: Self.serverAPI(refunded), rules: EntitlementRules(), now: Build.now)
        #expect(rows.last == Disagreement(accountId: "a", kind: .state, productId: "pro.monthly", verifyReceipt: "active", serverAPI: "refunded"))
        #expect(rows.first?.serverAPI == Timestamp.format(Build.day(-1)) && rows.first?.verifyReceipt == nil)
    }

    @Test func anExpiryThatDiffers() {
        let short = [Build.tx("1", purchased: -10, expires: 20)]
        let long = [Build.tx("1", purchased: -10, expires: 25)]
        // Both active: only the expiry differs.
        #expect(Self.kinds(short, long) == [.expiry])
    }

    @Test func aFinishedConsumableOnlyTheAPIListsIsNoDisagreement() {
        let coins = [Build.tx("9", "coins.100", purchased: -3)]
        #expect(Self.kinds([], coins, consumables: ["coins.100"]).isEmpty)
        // Without knowing it is a consumable, the transaction differs; the entitlement does not,
        // since a product nothing types is left as stored by both.
        #expect(Self.kinds([], coins) == [.onlyInServerAPI])
    }
}
