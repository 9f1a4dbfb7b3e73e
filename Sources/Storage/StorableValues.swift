import Hashing
import AppStoreModels
import Foundation

/// What PostgreSQL cannot store, found before a batch is written: one receipt with a NUL byte in
/// a product id, a date past year 9999 or a number past its column's range must fail that
/// receipt with a reason, never the batch it shares with ordinary accounts, never the run.
///
/// The problems name the field, never the value: a hostile value must not reach reports or logs.
public enum StorableValues {
    /// The first timestamp every column takes and every reader reads back (0001-01-01T00:00:00Z).
    static let earliest = Date(timeIntervalSince1970: -62_135_596_800)
    /// The first timestamp past year 9999 (10000-01-01T00:00:00Z).
    static let pastLatest = Date(timeIntervalSince1970: 253_402_300_800)

    /// Why `text` cannot be stored in a `text` or `jsonb` column, if it cannot.
    public static func problem(text: String?, field: String) -> String? {
        guard var text else { return nil }
        // Over the contiguous bytes: every field of every answer passes here.
        guard text.withUTF8({ $0.contains(0) }) else { return nil }
        return "\(field) holds a NUL byte"
    }

    /// Why `date` cannot be stored in a `timestamptz` column and read back, if it cannot.
    public static func problem(date: Date?, field: String) -> String? {
        guard let date else { return nil }
        guard date >= earliest && date < pastLatest else { return "\(field) is outside the years 1 to 9999" }
        return nil
    }

    /// The first value of Apple's answer that the ledger, the receipt row or a correction could
    /// not store: every transaction, every renewal info and the environment. Checked for every
    /// answer, so nothing is allocated unless something is wrong.
    public static func problem(in response: VerifyReceiptResponse) -> String? {
        if let problem = problem(text: response.environment, field: "environment") { return problem }
        for transaction in response.latestReceiptInfo {
            if let problem = problem(in: transaction) { return problem }
        }
        for transaction in response.receipt?.inApp ?? [] {
            if let problem = problem(in: transaction) { return problem }
        }
        for (index, renewal) in response.pendingRenewalInfo.enumerated() {
            if let problem = problem(in: renewal) { return "\(problem) of pending_renewal_info[\(index)]" }
        }
        return nil
    }

    static func problem(in renewal: PendingRenewalInfo) -> String? {
        if let problem = problem(text: renewal.originalTransactionId, field: "original_transaction_id") { return problem }
        if let problem = problem(text: renewal.productId, field: "product_id") { return problem }
        if let problem = problem(text: renewal.autoRenewProductId, field: "auto_renew_product_id") { return problem }
        return problem(date: renewal.gracePeriodExpiresDate, field: "grace_period_expires_date_ms")
    }

    /// The first value of one transaction that a ledger row could not hold.
    public static func problem(in transaction: Transaction) -> String? {
        guard let problem = firstProblem(in: transaction) else { return nil }
        // The id names the transaction in the reason only once it is known to be printable text.
        return "\(problem) in " + (transaction.transactionId.utf8.contains(0) ? "a transaction" : "transaction \(transaction.transactionId)")
    }

    private static func firstProblem(in transaction: Transaction) -> String? {
        if let problem = problem(text: transaction.transactionId, field: "transaction_id") { return problem }
        if let problem = problem(text: transaction.originalTransactionId, field: "original_transaction_id") { return problem }
        if let problem = problem(text: transaction.productId, field: "product_id") { return problem }
        if let problem = problem(text: transaction.webOrderLineItemId, field: "web_order_line_item_id") { return problem }
        if let problem = problem(text: transaction.subscriptionGroupIdentifier, field: "subscription_group_identifier") { return problem }
        if let problem = problem(text: transaction.offerCodeRefName, field: "offer_code_ref_name") { return problem }
        if let problem = problem(text: transaction.promotionalOfferId, field: "promotional_offer_id") { return problem }
        if let problem = problem(text: transaction.inAppOwnershipType, field: "in_app_ownership_type") { return problem }
        if let problem = problem(date: transaction.purchaseDate, field: "purchase_date_ms") { return problem }
        if let problem = problem(date: transaction.originalPurchaseDate, field: "original_purchase_date_ms") { return problem }
        if let problem = problem(date: transaction.expiresDate, field: "expires_date_ms") { return problem }
        if let problem = problem(date: transaction.cancellationDate, field: "cancellation_date_ms") { return problem }
        if let problem = outOfRange(transaction.cancellationReason, field: "cancellation_reason") { return problem }
        return outOfRange(transaction.quantity, field: "quantity")
    }

    /// Why a number cannot go into an `integer` column.
    public static func outOfRange(_ number: Int?, field: String) -> String? {
        guard let number, !(Int(Int32.min)...Int(Int32.max) ~= number) else { return nil }
        return "\(field) is past the range of an integer column"
    }

    /// The first value of a local decode that the receipt row could not store.
    public static func problem(in local: ReceiptIdentifiers) -> String? {
        problem(text: local.bundleId, field: "the bundle id")
            ?? local.originalTransactionIds.lazy.compactMap { problem(text: $0, field: "an original transaction id") }.first
    }
}

extension ReceiptIdentifiers {
    /// Names the blob a stored decode came from (`receipt_decoded_digest`): MurmurHash64A of its
    /// text. (Until 2026-11-24 FNV-1a: a digest stored then matches no blob now, so the first run
    /// after that decodes each receipt once more and stores the new digest.)
    public static func digest(ofBlob blob: String) -> Int64 {
        Int64(bitPattern: MurmurHash64A.digest(blob))
    }
}
