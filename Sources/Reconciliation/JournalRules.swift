import AppStoreModels
import Foundation

/// One ledger transaction as the journal reads it: its terms as the ledger holds them now, the
/// catalog's price beside them.
public struct JournalTransaction: Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    /// Apple's signed type, else the catalog's, else "an expiry means auto-renewable".
    public var productType: ProductType
    public var purchaseDate: Date?
    /// The purchase's own date, where this is a restored copy of it.
    public var originalPurchaseDate: Date?
    public var cancellationDate: Date?
    public var cancellationReason: Int?
    public var isUpgraded: Bool?
    public var isTrialPeriod: Bool?
    public var ownershipType: String?
    public var offerDiscountType: String?
    public var signedPrice: Price?
    public var catalogPrice: Price?
    public var revocationType: String?
    public var revocationPercentage: Int?
    /// When Apple gave the word the row holds: a signed snapshot's `signedDate`, a live answer's time.
    public var appleAsOf: Date?

    public init(transactionId: String, originalTransactionId: String? = nil, webOrderLineItemId: String? = nil,
                productType: ProductType, purchaseDate: Date? = nil, originalPurchaseDate: Date? = nil, cancellationDate: Date? = nil,
                cancellationReason: Int? = nil,
                isUpgraded: Bool? = nil, isTrialPeriod: Bool? = nil, ownershipType: String? = nil, offerDiscountType: String? = nil,
                signedPrice: Price? = nil, catalogPrice: Price? = nil, revocationType: String? = nil, revocationPercentage: Int? = nil,
                appleAsOf: Date? = nil) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.productType = productType
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.cancellationDate = cancellationDate
        self.cancellationReason = cancellationReason
        self.isUpgraded = isUpgraded
        self.isTrialPeriod = isTrialPeriod
        self.ownershipType = ownershipType
        self.offerDiscountType = offerDiscountType
        self.signedPrice = signedPrice
        self.catalogPrice = catalogPrice
        self.revocationType = revocationType
        self.revocationPercentage = revocationPercentage
        self.appleAsOf = appleAsOf
    }

    /// Nothing was paid: a free trial, or a family member's copy (the organizer's purchase carries the money).
    var paidNothing: Bool {
        ownershipType == InAppOwnershipType.familyShared.rawValue || offerDiscountType == "FREE_TRIAL" || isTrialPeriod == true
            || signedPrice?.milliunits == 0
    }

    /// A cancellation that sent money back: reason 0 or 1, not an upgrade, not Family Sharing's.
    var isRefunded: Bool {
        cancellationDate != nil && [0, 1].contains(cancellationReason ?? 0) && isUpgraded != true
            && revocationType != RevocationType.familyRevoke.rawValue && ownershipType != InAppOwnershipType.familyShared.rawValue
    }
}

/// An event the journal holds, as far as the rules need it.
public struct JournalRecord: Sendable, Equatable {
    public var kind: FinanceEvent.Kind
    /// The event an adjustment corrects; nil on every other event.
    public var adjusts: FinanceEvent.Kind?
    public var transactionId: String
    public var time: Date
    public var amount: Int64?
    public var currency: String?
    /// The list price the amount came from.
    public var price: Int64?
    public var amountSource: FinanceEvent.AmountSource

    public init(kind: FinanceEvent.Kind, adjusts: FinanceEvent.Kind? = nil, transactionId: String, time: Date, amount: Int64?,
                currency: String?, price: Int64? = nil, amountSource: FinanceEvent.AmountSource) {
        self.kind = kind
        self.adjusts = adjusts
        self.transactionId = transactionId
        self.time = time
        self.amount = amount
        self.currency = currency
        self.price = price
        self.amountSource = amountSource
    }

    /// Part of the sale's own money: the sale, or an adjustment of it.
    var isSale: Bool { [.purchase, .renewal].contains(kind == .adjustment ? adjusts : kind) }
    /// Part of its refunds' money: a refund, a reversal, or an adjustment of either.
    var isRefund: Bool { [.refund, .refundReversal].contains(kind == .adjustment ? adjusts : kind) }
}

/// An event to append: recorded against the ledger row `transactionId`, whose columns it carries.
public struct JournalAppend: Sendable, Equatable {
    public var kind: FinanceEvent.Kind
    public var adjusts: FinanceEvent.Kind?
    public var transactionId: String
    /// The nth event of its kind for its sale (the journal's unique key with the transaction id).
    public var occurrence: Int
    public var time: Date
    public var amount: Int64?
    public var currency: String?
    /// The list price the amount came from, in milliunits of `currency`.
    public var price: Int64?
    public var amountSource: FinanceEvent.AmountSource
}

/// The finance journal's rules (docs/reports.md, "Right on every path"): what one sale's ledger
/// rows, as Apple's best word now has them, add to what the journal already holds of that sale,
/// so that its net per currency ends equal to the money that moved, whichever source spoke first
/// and in whatever order. The journal is never edited: a better word later is an `adjustment`, a
/// refund Apple no longer shows is a `refund_reversal`. Pure: Storage reads, locks and writes.
public enum JournalRules {
    /// The purchase a transaction is part of: a subscription's `webOrderLineItemId` within its
    /// chain (a restored copy keeps both: the same sale), a non-consumable's original transaction,
    /// else the transaction itself. A family member's copy is its own (it carries no money).
    public static func saleKey(_ transaction: JournalTransaction) -> String {
        let own = "tx:" + transaction.transactionId
        if transaction.ownershipType == InAppOwnershipType.familyShared.rawValue { return own }
        switch transaction.productType {
        case .autoRenewable:
            guard let line = transaction.webOrderLineItemId, !line.isEmpty else { return own }
            return "wo:" + (transaction.originalTransactionId ?? transaction.transactionId) + "/" + line
        case .nonConsumable: return "ot:" + (transaction.originalTransactionId ?? transaction.transactionId)
        case .consumable, .nonRenewing: return own
        }
    }

    /// The events to append for one sale: `rows` are the ledger rows of its key (every row an
    /// event of `recorded` names among them), `recorded` what the journal holds for it, `now`
    /// the time of a reversal Apple's word left undated.
    public static func appends(rows unsorted: [JournalTransaction], recorded: [JournalRecord], now: Date) -> [JournalAppend] {
        let rows = unsorted.sorted { $0.transactionId < $1.transactionId }
        guard !rows.isEmpty else { return [] }
        var ledger = Appending(recorded: recorded)
        let sale = ledger.sale(rows)
        ledger.refund(rows, sale: sale, now: now)
        return ledger.appends
    }

    /// Minus what a refund gave back of `sale`: all of it, or `percentage` (milliunits of a
    /// percent) for `REFUND_PRORATED`, rounded half away from zero to a milliunit.
    public static func refundAmount(sale: Int64, revocationType: String?, percentage: Int?) -> Int64 {
        guard revocationType == RevocationType.refundProrated.rawValue, let percentage else { return -sale }
        let (quotient, remainder) = Int64(100_000).dividingFullWidth(sale.multipliedFullWidth(by: Int64(min(max(percentage, 0), 100_000))))
        return -(remainder.magnitude * 2 >= 100_000 ? quotient + (sale < 0 ? -1 : 1) : quotient)
    }

    /// Money per currency ("" where unknown), zeros left out.
    typealias Net = [String: Int64]

    static func net(_ records: [JournalRecord]) -> Net {
        records.reduce(into: Net()) { net, record in
            if let amount = record.amount { net[record.currency ?? "", default: 0] += amount }
        }.filter { $0.value != 0 }
    }

    static func rank(_ source: FinanceEvent.AmountSource) -> Int {
        switch source {
        case .none: 0
        case .catalog: 1
        case .signed: 2
        }
    }
}

/// What a sale is worth, and where that came from.
struct SaleTerms {
    var amount: Int64?
    var currency: String?
    var price: Int64?
    var source: FinanceEvent.AmountSource

    var net: JournalRules.Net { amount.flatMap { $0 == 0 ? nil : [currency ?? "": $0] } ?? [:] }

    /// The sale's terms on Apple's best word among `rows`: a signed price beats the catalog's.
    init(rows: [JournalTransaction], saleRow: JournalTransaction) {
        let basis = saleRow.signedPrice != nil ? saleRow : rows.first { $0.signedPrice != nil } ?? saleRow
        let (price, source): (Price?, FinanceEvent.AmountSource) =
            basis.signedPrice.map { ($0, .signed) } ?? basis.catalogPrice.map { ($0, .catalog) } ?? (nil, .none)
        self.init(amount: basis.paidNothing ? 0 : price?.milliunits, currency: price?.currency, price: price?.milliunits, source: source)
    }

    init(amount: Int64?, currency: String?, price: Int64?, source: FinanceEvent.AmountSource) {
        self.amount = amount
        self.currency = currency
        self.price = price
        self.source = source
    }
}
