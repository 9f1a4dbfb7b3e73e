import Foundation
import Throttling

/// How hard to try, and what counts as worth another try (docs/apple.md, "verifyReceipt").
public struct VerificationPolicy: Sendable {
    /// Attempts per receipt, each of which may include one redirect hop.
    public var maximumAttempts: Int
    public var backoff: Backoff
    public var connectTimeout: Duration
    /// Limit for one exchange with Apple.
    public var requestTimeout: Duration
    /// Larger answers are refused (Apple's largest real answers are a few MB).
    public var maximumResponseBytes: Int
    /// Larger blobs are not sent (the largest real receipts are a few hundred KB).
    public var maximumReceiptBytes: Int
    /// Sent to Apple as `exclude-old-transactions`; off by default: the ledger needs all history.
    public var excludeOldTransactions: Bool
    /// A `Retry-After` longer than this is not waited for: the receipt is deferred instead.
    public var maximumRetryAfter: Duration

    public init(
        maximumAttempts: Int = 5, backoff: Backoff = Backoff(), connectTimeout: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(60), maximumResponseBytes: Int = 32 << 20,
        maximumReceiptBytes: Int = 8 << 20, excludeOldTransactions: Bool = false,
        maximumRetryAfter: Duration = .seconds(120)
    ) {
        self.maximumAttempts = max(1, maximumAttempts)
        self.backoff = backoff
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.maximumResponseBytes = maximumResponseBytes
        self.maximumReceiptBytes = maximumReceiptBytes
        self.excludeOldTransactions = excludeOldTransactions
        self.maximumRetryAfter = maximumRetryAfter
    }

    /// What to do with one status in an HTTP 200 answer.
    public enum StatusClass: Equatable, Sendable {
        case verified
        case redirectToSandbox
        case redirectToProduction
        case retry
        case final
    }

    /// The table of docs/apple.md: retried are 21100-21199 unless the retry flag says no, 21002, 21005
    /// and 21009; final are 21000, 21003, 21004, 21010, 21100-21199 flagged not retryable, and
    /// every status Apple may invent later. Status 0 without a `receipt` is a partial answer, not
    /// an empty account: it is retried like 21002 (and fails if it persists), never verified.
    public static func classify(status: Int, isRetryable: Bool?, hasReceipt: Bool) -> StatusClass {
        switch status {
        case 0: hasReceipt ? .verified : .retry
        case 21006: hasReceipt ? .verified : .final
        case 21007: .redirectToSandbox
        case 21008: .redirectToProduction
        case 21002, 21005, 21009: .retry
        case 21100...21199: isRetryable == false ? .final : .retry
        default: .final
        }
    }
}
