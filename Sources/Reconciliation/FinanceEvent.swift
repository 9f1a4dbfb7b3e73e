import Foundation

/// One event of the finance journal (docs/reports.md, "The finance journal"): money as it moved,
/// with the ledger row as it stood when the job recorded it. What `export-finance` writes a row of.
public struct FinanceEvent: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        /// The first transaction of its chain (transaction_id = original_transaction_id).
        case purchase
        /// Every later transaction of a subscription.
        case renewal
        /// Money back to the customer: a cancellation for reason 0 or 1, not an upgrade nor a family revoke.
        case refund
        /// Apple reversed a refund: the money came back, at the reversal's own time.
        case refundReversal = "refund_reversal"
        /// Apple's better word on an event recorded before (its signed price, another currency, a
        /// refund's percentage): the difference, at the corrected event's time (`adjusts`).
        case adjustment
    }

    /// Where the price behind `amount` came from (`amount_source`).
    public enum AmountSource: String, Sendable, CaseIterable {
        /// Apple's signed `price`.
        case signed
        /// `iap.products.price`.
        case catalog
        /// No price known: the amount is empty, unless the rules make it 0 (a family-shared copy, a trial).
        case none
    }

    public var kind: Kind
    public var time: Date
    public var accountId: String
    public var productId: String
    public var productType: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var purchaseDate: Date?
    public var expiresDate: Date?
    public var cancellationDate: Date?
    public var cancellationReason: Int?
    public var quantity: Int?
    public var isTrialPeriod: Bool?
    public var isInIntroOfferPeriod: Bool?
    public var offerCodeRefName: String?
    public var promotionalOfferId: String?
    public var ownershipType: String?
    public var environment: String?
    /// The list price in milliunits of `currency`: Apple's signed price, else the catalog's.
    public var price: Int64?
    public var currency: String?
    /// What moved, in milliunits of `currency`; negative when it went back to the customer.
    public var amount: Int64? = nil
    public var amountSource: AmountSource = .none
    /// Apple's raw `revocationType` and `revocationPercentage`, where it gave them.
    public var revocationType: String? = nil
    public var revocationPercentage: Int? = nil
    /// Apple's three-letter storefront, from signed data.
    public var storefront: String? = nil
    /// When the job recorded the event: what `--as-of` compares.
    public var recordedAt: Date
    /// The event an adjustment corrects; nil on every other event.
    public var adjusts: Kind? = nil

    public init(kind: Kind, time: Date, accountId: String, productId: String, productType: String, transactionId: String,
                originalTransactionId: String?, webOrderLineItemId: String?, purchaseDate: Date?, expiresDate: Date?,
                cancellationDate: Date?, cancellationReason: Int?, quantity: Int?, isTrialPeriod: Bool?, isInIntroOfferPeriod: Bool?,
                offerCodeRefName: String?, promotionalOfferId: String?, ownershipType: String?, environment: String?,
                price: Int64?, currency: String?, recordedAt: Date) {
        self.kind = kind
        self.time = time
        self.accountId = accountId
        self.productId = productId
        self.productType = productType
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.cancellationDate = cancellationDate
        self.cancellationReason = cancellationReason
        self.quantity = quantity
        self.isTrialPeriod = isTrialPeriod
        self.isInIntroOfferPeriod = isInIntroOfferPeriod
        self.offerCodeRefName = offerCodeRefName
        self.promotionalOfferId = promotionalOfferId
        self.ownershipType = ownershipType
        self.environment = environment
        self.price = price
        self.currency = currency
        self.recordedAt = recordedAt
    }
}
