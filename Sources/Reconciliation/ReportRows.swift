import AppStoreModels
import Foundation

/// A receipt that did not verify, as `failures.csv` lists it.
public struct FailureRecord: Sendable {
    public var accountId: String
    public var receiptId: Int64
    public var outcome: ReceiptOutcome
    public var appleStatus: Int?
    public var attempts: Int
    public var endpoints: String
    public var reason: String

    public init(accountId: String, receiptId: Int64, outcome: ReceiptOutcome, appleStatus: Int?, attempts: Int, endpoints: String,
                reason: String) {
        self.accountId = accountId
        self.receiptId = receiptId
        self.outcome = outcome
        self.appleStatus = appleStatus
        self.attempts = attempts
        self.endpoints = endpoints
        self.reason = reason
    }
}

/// A receipt's failed verification, as `failures.csv` and `explain` show it.
public struct ReceiptFailure: Sendable, Equatable {
    /// Apple's or the network's words, with the HTTP code or Apple status.
    public var reason: String
    /// Attempts made in the run (a redirect hop belongs to its attempt).
    public var attempts: Int
    /// The hosts asked, in order: `Production>Sandbox`.
    public var endpoints: String

    public init(reason: String, attempts: Int, endpoints: String) {
        self.reason = reason
        self.attempts = attempts
        self.endpoints = endpoints
    }
}

/// One correction as `corrections.csv` lists it.
public struct CorrectionRow: Sendable {
    public var id: Int64
    public var accountId: String
    public var productId: String
    public var kind: Correction.Kind
    public var reason: String
    public var status: CorrectionStatus
    public var appliedAt: Date?
    public var beforeState: String?
    public var afterState: String?
    public var beforeExpiresAt: Date?
    public var afterExpiresAt: Date?
    public var environment: String?

    public init(id: Int64, accountId: String, productId: String, kind: Correction.Kind, reason: String, status: CorrectionStatus, appliedAt: Date?,
                beforeState: String?, afterState: String?, beforeExpiresAt: Date?, afterExpiresAt: Date?, environment: String?) {
        self.id = id
        self.accountId = accountId
        self.productId = productId
        self.kind = kind
        self.reason = reason
        self.status = status
        self.appliedAt = appliedAt
        self.beforeState = beforeState
        self.afterState = afterState
        self.beforeExpiresAt = beforeExpiresAt
        self.afterExpiresAt = afterExpiresAt
        self.environment = environment
    }
}

/// One event of the finance audit CSV (contract section 7): a purchase, a renewal or a refund
/// taken from the ledger, with the price Apple's signed data gave or the catalog's.
public struct FinanceEvent: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// The first transaction of its chain (transaction_id = original_transaction_id).
        case purchase
        /// Every later transaction of a subscription.
        case renewal
        /// A cancellation for reason 0 or 1 that was not an upgrade.
        case refund
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
    /// Decimal text as PostgreSQL's numeric gives it (`0.99`): money is never a binary float.
    public var price: String?
    public var currency: String?

    public init(kind: Kind, time: Date, accountId: String, productId: String, productType: String, transactionId: String,
                originalTransactionId: String?, webOrderLineItemId: String?, purchaseDate: Date?, expiresDate: Date?,
                cancellationDate: Date?, cancellationReason: Int?, quantity: Int?, isTrialPeriod: Bool?, isInIntroOfferPeriod: Bool?,
                offerCodeRefName: String?, promotionalOfferId: String?, ownershipType: String?, environment: String?,
                price: String?, currency: String?) {
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
    }
}
