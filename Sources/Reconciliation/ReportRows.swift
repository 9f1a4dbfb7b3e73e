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

