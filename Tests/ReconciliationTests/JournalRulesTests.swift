import AppStoreModels
import Foundation
import Reconciliation
import Testing

/// The journal's rules (docs/reports.md, "Right on every path") as a table: a sale's ledger rows
/// and what the journal holds, and the events that must follow, every amount worked out by hand.
@Suite struct JournalRulesTests {
    static let bought = Date(timeIntervalSince1970: 1_790_000_000)
    static let refundedAt = Date(timeIntervalSince1970: 1_791_000_000)
    static let reinstatedAt = Date(timeIntervalSince1970: 1_792_000_000)
    static let now = Date(timeIntervalSince1970: 1_793_000_000)

    static func row(_ id: String = "t1", original: String? = "t1", line: String? = "w1", type: ProductType = .autoRenewable,
                    signed: Price? = nil, catalog: Price? = Price(milliunits: 4_990, currency: "USD"),
                    _ edit: (inout JournalTransaction) -> Void = { _ in }) -> JournalTransaction {
        var row = JournalTransaction(transactionId: id, originalTransactionId: original, webOrderLineItemId: line, productType: type,
                                     purchaseDate: bought, signedPrice: signed, catalogPrice: catalog)
        edit(&row)
        return row
    }

    static func refunded(_ row: inout JournalTransaction) {
        row.cancellationDate = refundedAt
        row.cancellationReason = 0
    }

    /// What the journal holds after these appends.
    static func records(_ appends: [JournalAppend]) -> [JournalRecord] {
        appends.map {
            JournalRecord(kind: $0.kind, adjusts: $0.adjusts, transactionId: $0.transactionId, time: $0.time, amount: $0.amount,
                          currency: $0.currency, price: $0.price, amountSource: $0.amountSource)
        }
    }

    /// `kind[/adjusts] amount currency source @time`, one per append.
    static func text(_ appends: [JournalAppend]) -> [String] {
        appends.map {
            let time = $0.time == bought ? "bought" : $0.time == refundedAt ? "refunded" : $0.time == reinstatedAt ? "reinstated" : "now"
            return "\($0.kind.rawValue)\($0.adjusts.map { "/\($0.rawValue)" } ?? "") \($0.amount.map(String.init) ?? "-") "
                + "\($0.currency ?? "-") \($0.amountSource.rawValue) @\(time)"
        }
    }

    /// Applies `steps` in turn (each the sale's rows as the ledger then holds them), the journal
    /// growing as it would; returns every step's appends.
    static func journal(_ steps: [[JournalTransaction]]) -> [[String]] {
        var held: [JournalRecord] = []
        return steps.map { rows in
            let appends = JournalRules.appends(rows: rows, recorded: held, now: now)
            held += records(appends)
            return text(appends)
        }
    }

    static let eur = Price(milliunits: 4_490, currency: "EUR")

    @Test func aSaleIsRecordedOnceAtApplesSignedPriceElseTheCatalogs() {
        #expect(Self.journal([[Self.row(signed: Self.eur)], [Self.row(signed: Self.eur)]]) == [["purchase 4490 EUR signed @bought"], []])
        #expect(Self.journal([[Self.row()]]) == [["purchase 4990 USD catalog @bought"]])
        #expect(Self.journal([[Self.row(catalog: nil)]]) == [["purchase - - none @bought"]])
        // A later transaction of the chain is a renewal.
        #expect(Self.journal([[Self.row("t2", line: "w2")]]) == [["renewal 4990 USD catalog @bought"]])
    }

    @Test func anotherCurrencyLaterReversesTheOldAmountAndBooksTheNew() {
        #expect(Self.journal([[Self.row()], [Self.row(signed: Self.eur)], [Self.row(signed: Self.eur)]]) == [
            ["purchase 4990 USD catalog @bought"],
            ["adjustment/purchase -4990 USD signed @bought", "adjustment/purchase 4490 EUR signed @bought"],
            [],
        ])
    }

    @Test func anOffersSignedPriceIsTheDifferenceInTheSameCurrency() {
        let offer = Price(milliunits: 2_990, currency: "USD")
        #expect(Self.journal([[Self.row()], [Self.row(signed: offer)]]) == [
            ["purchase 4990 USD catalog @bought"], ["adjustment/purchase -2000 USD signed @bought"],
        ])
    }

    @Test func aCatalogEditedLaterChangesNoSaleMadeBefore() {
        let raised = Price(milliunits: 5_990, currency: "USD")
        #expect(Self.journal([[Self.row()], [Self.row(catalog: raised)]]) == [["purchase 4990 USD catalog @bought"], []])
        // A price where none was known is better terms.
        #expect(Self.journal([[Self.row(catalog: nil)], [Self.row()]]) == [
            ["purchase - - none @bought"], ["adjustment/purchase 4990 USD catalog @bought"],
        ])
        // A free trial learned late, at the same list price.
        #expect(Self.journal([[Self.row()], [Self.row { $0.isTrialPeriod = true }]]) == [
            ["purchase 4990 USD catalog @bought"], ["adjustment/purchase -4990 USD catalog @bought"],
        ])
    }

    @Test func aRestoredCopyIsNoSale() {
        let restored = Self.row("t9", original: "t1")
        #expect(JournalRules.saleKey(restored) == JournalRules.saleKey(Self.row()) && JournalRules.saleKey(restored) == "wo:t1/w1")
        // Another chain's web order line item of the same number is another sale.
        #expect(JournalRules.saleKey(Self.row("u1", original: "u1")) != JournalRules.saleKey(Self.row()))
        #expect(Self.journal([[restored], [restored, Self.row()]]) == [["renewal 4990 USD catalog @bought"], []])
        // A non-consumable: one purchase per original transaction.
        let copy = Self.row("n2", original: "n1", line: nil, type: .nonConsumable)
        #expect(Self.journal([[Self.row("n1", original: "n1", line: nil, type: .nonConsumable)], [copy]]) == [
            ["purchase 4990 USD catalog @bought"], [],
        ])
        // The original's row told no date, its restored copy the first purchase's: sold then (a
        // copy told of it), whichever row carries it, and once only when either date moves later.
        let undated = Self.row("n1", original: "n1", line: nil, type: .nonConsumable) { $0.purchaseDate = nil }
        let told = Self.row("n2", original: "n1", line: nil, type: .nonConsumable) { ($0.purchaseDate, $0.originalPurchaseDate) = (nil, Self.bought) }
        let moved = Self.row("n2", original: "n1", line: nil, type: .nonConsumable) { $0.originalPurchaseDate = Self.refundedAt }
        #expect(Self.journal([[undated, told], [moved]]) == [["purchase 4990 USD catalog @bought"], []])
        // Consumables are one each; a family member's copy is its own.
        #expect(JournalRules.saleKey(Self.row("c2", original: "c1", type: .consumable)) == "tx:c2")
        #expect(JournalRules.saleKey(Self.row { $0.ownershipType = "FAMILY_SHARED" }) == "tx:t1")
    }

    /// Issue 51's non-consumable: 29.99 refunded at 50 %, first seen unsigned at the catalog's
    /// 19.99. Money moved: 29.99 - 14.995 = 14.995.
    @Test func aProratedRefundLearnedAfterAnUnsignedCancellationIsAnAdjustment() {
        let paid = Price(milliunits: 29_990, currency: "USD")
        let unsigned = Self.row("n1", original: "n1", line: nil, type: .nonConsumable, catalog: Price(milliunits: 19_990, currency: "USD"),
                                Self.refunded)
        var signed = unsigned
        signed.signedPrice = paid
        signed.revocationType = "REFUND_PRORATED"
        signed.revocationPercentage = 50_000
        let steps = Self.journal([[unsigned], [signed], [signed]])
        #expect(steps == [
            ["purchase 19990 USD catalog @bought", "refund -19990 USD catalog @refunded"],
            ["adjustment/purchase 10000 USD signed @bought", "adjustment/refund 4995 USD signed @refunded"],
            [],
        ])
    }

    @Test func aRefundIsPricedFromItsSaleInTheSalesCurrency() {
        let cancelled = Self.row(signed: Self.eur) {
            Self.refunded(&$0)
            $0.revocationType = "REFUND_FULL"
        }
        #expect(Self.journal([[cancelled]]) == [["purchase 4490 EUR signed @bought", "refund -4490 EUR signed @refunded"]])
        // Recorded at the catalog's 4.99, the catalog raised to 5.99, then refunded: 4.99 went back.
        let raised = Price(milliunits: 5_990, currency: "USD")
        #expect(Self.journal([[Self.row()], [Self.row(catalog: raised) { Self.refunded(&$0) }]]) == [
            ["purchase 4990 USD catalog @bought"], ["refund -4990 USD catalog @refunded"],
        ])
        // A free trial refunded gives back what it cost: nothing.
        let trial = Self.row {
            $0.isTrialPeriod = true
            Self.refunded(&$0)
        }
        #expect(Self.journal([[trial]]) == [["purchase 0 USD catalog @bought", "refund 0 USD catalog @refunded"]])
        // Refunded through the catalog first, then the EUR sale: the refund follows its sale.
        #expect(Self.journal([[Self.row { Self.refunded(&$0) }], [cancelled]]) == [
            ["purchase 4990 USD catalog @bought", "refund -4990 USD catalog @refunded"],
            ["adjustment/purchase -4990 USD signed @bought", "adjustment/purchase 4490 EUR signed @bought",
             "adjustment/refund -4490 EUR signed @refunded", "adjustment/refund 4990 USD signed @refunded"],
        ])
    }

    @Test func aRefundApplesAnswerNoLongerShowsIsReversedAtThatAnswersTime() {
        let reinstated = Self.row(signed: Self.eur) { $0.appleAsOf = Self.reinstatedAt }
        let cancelled = Self.row(signed: Self.eur) { Self.refunded(&$0) }
        #expect(Self.journal([[cancelled], [reinstated], [reinstated], [cancelled]]) == [
            ["purchase 4490 EUR signed @bought", "refund -4490 EUR signed @refunded"],
            ["refund_reversal 4490 EUR signed @reinstated"],
            [],
            ["refund -4490 EUR signed @refunded"],
        ])
        // Undated (no word's time): when first seen.
        #expect(Self.journal([[cancelled], [Self.row(signed: Self.eur)]])[1] == ["refund_reversal 4490 EUR signed @now"])
    }

    @Test func noMoneyMovesForAnUpgradeOrFamilySharingEvenWhenLearnedLate() {
        let upgraded = Self.row(signed: Self.eur) {
            Self.refunded(&$0)
            $0.isUpgraded = true
        }
        #expect(Self.journal([[upgraded]]) == [["purchase 4490 EUR signed @bought"]])
        // Recorded as a refund while unsigned, then Apple's word says it was an upgrade: corrected to nothing.
        #expect(Self.journal([[Self.row(signed: Self.eur) { Self.refunded(&$0) }], [upgraded]])[1] == ["adjustment/refund 4490 EUR signed @refunded"])
        let family = Self.row(signed: Self.eur) {
            Self.refunded(&$0)
            $0.ownershipType = "FAMILY_SHARED"
        }
        #expect(Self.journal([[family]]) == [["purchase 0 EUR signed @bought"]])
        let revoked = Self.row(signed: Self.eur) {
            Self.refunded(&$0)
            $0.revocationType = "FAMILY_REVOKE"
        }
        #expect(Self.journal([[revoked]]) == [["purchase 4490 EUR signed @bought"]])
    }

    @Test func aRefundWhoseOwnRowWasNotReadSaysNothing() {
        let held = Self.records(JournalRules.appends(rows: [Self.row { Self.refunded(&$0) }], recorded: [], now: Self.now))
        #expect(JournalRules.appends(rows: [Self.row("t9", original: "t1")], recorded: held, now: Self.now).isEmpty)
    }

    @Test func aSaleRecordedTwiceBeforeSalesHadKeysIsCorrected() {
        let twice = Self.records(JournalRules.appends(rows: [Self.row()], recorded: [], now: Self.now)
            + JournalRules.appends(rows: [Self.row("t9", original: "t1")], recorded: [], now: Self.now))
        #expect(Self.text(JournalRules.appends(rows: [Self.row(), Self.row("t9", original: "t1")], recorded: twice, now: Self.now))
                == ["adjustment/renewal -4990 USD catalog @bought"])
    }

    @Test func aProratedAmountRoundsHalfAwayFromZeroWithoutOverflow() {
        #expect(JournalRules.refundAmount(sale: 59_990, revocationType: "REFUND_PRORATED", percentage: 72_500) == -43_493)
        #expect(JournalRules.refundAmount(sale: 3, revocationType: "REFUND_PRORATED", percentage: 50_000) == -2)
        #expect(JournalRules.refundAmount(sale: 3, revocationType: "REFUND_FULL", percentage: 50_000) == -3)
        #expect(JournalRules.refundAmount(sale: 3, revocationType: "REFUND_PRORATED", percentage: nil) == -3)
        // The largest signed price (10^15 milliunits) times 100 %: past Int64 before the division.
        #expect(JournalRules.refundAmount(sale: 1_000_000_000_000_000, revocationType: "REFUND_PRORATED", percentage: 99_999)
                == -999_990_000_000_000)
        #expect(JournalRules.refundAmount(sale: 10, revocationType: "REFUND_PRORATED", percentage: 250_000) == -10)
    }
}
