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

/// One correction as reports list it.
public struct CorrectionRecord: Sendable {
    public var id: Int64
    public var accountId: String
    public var productId: String
    public var kind: String
    public var reason: String
    public var status: String
    public var appliedAt: Date?
    public var beforeState: String?
    public var afterState: String?
    public var beforeExpiresAt: Date?
    public var afterExpiresAt: Date?
    public var environment: String?

    public init(id: Int64, accountId: String, productId: String, kind: String, reason: String, status: String, appliedAt: Date?,
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
