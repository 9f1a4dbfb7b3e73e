import AppStoreModels
import CivilCalendar
import Foundation
import Logging
import Postgres
import Reconciliation
import Storage

/// Processes the stored App Store Server Notifications (contract section 8), oldest first, each
/// in one transaction with its effects. Notifications are hints: they bring cancellations into
/// the ledger and make the account's receipts due now, and Apple's verifyReceipt answer in the
/// same run decides the entitlements.
struct NotificationProcessor: Sendable {
    var store: NotificationStore
    var ledger: ReconciliationStore
    var sharedSecret: String
    /// Unmatched notifications are retried until they are this old, then given up.
    var maximumAge: Duration
    var logger: Logger

    /// Processes every unprocessed notification and adds its counts to `summary`.
    func process(runId: Int64, now: Date, summary: inout RunSummary) async throws {
        var after: (Date, Int64)?
        while true {
            let page = try await ReconciliationRun.retryingLostConnections(logger: logger) { [after] in
                try await store.unprocessed(after: after, limit: 500)
            }
            guard let last = page.last else { return }
            after = (last.receivedAt, last.id)
            for pending in page {
                let processed = try await ReconciliationRun.retryingLostConnections(logger: logger) {
                    try await store.connection.withTransaction { _ in
                        try await store.claim(pending.id, runId: runId) ? try await process(pending, runId: runId, now: now) : nil
                    }
                }
                // Claimed by another worker (another shard), or processed meanwhile.
                guard let (type, outcome, account) = processed else { continue }
                summary.notifications[type, default: [:]][outcome, default: 0] += 1
                if type == "CONSUMPTION_REQUEST" && summary.consumptionRequests.count < 1_000 {
                    summary.consumptionRequests.append("notification \(pending.id)" + (account.map { ", account \($0)" } ?? ""))
                }
            }
        }
    }

    /// One notification, in the caller's transaction: returns its type, outcome and account.
    /// Locks are taken in a batch's order (receipts, then the ledger), so the two never deadlock.
    private func process(_ pending: NotificationStore.Pending, runId: Int64, now: Date) async throws -> (String, NotificationOutcome, String?) {
        let notification: ServerNotification
        do {
            notification = try ServerNotification.decode(Array(pending.body.utf8))
        } catch {
            try await store.mark(pending.id, outcome: .invalid, processed: true, accountId: nil, runId: runId, now: now)
            logger.warning("notification.invalid", metadata: ["notification.id": "\(pending.id)", "notification.reason": "\(error)"])
            return ("(none)", .invalid, nil)
        }
        let type = notification.notificationType
        guard notification.passwordMatches(sharedSecret) else {
            try await store.mark(pending.id, outcome: .rejected, processed: true, accountId: nil, runId: runId, now: now)
            logger.warning("notification.rejected", metadata: [
                "notification.id": "\(pending.id)", "notification.type": "\(type)", "notification.reason": "the password is not the shared secret",
            ])
            return (type, .rejected, nil)
        }
        guard let account = try await store.account(owning: notification.originalTransactionIds) else {
            let givenUp = now.timeIntervalSince(pending.receivedAt) > maximumAge.timeInterval
            try await store.mark(pending.id, outcome: .unmatched, processed: givenUp, accountId: nil, runId: runId, now: now)
            return (type, .unmatched, nil)
        }
        try await store.requestReverification(accountId: account, now: now)
        let environment = notification.appleEnvironment ?? .production
        try await ledger.upsertLedger(notification.unifiedReceipt.latestReceiptInfo.map {
            LedgerEntry(accountId: account, transaction: $0, environment: environment)
        })
        try await store.mark(pending.id, outcome: .applied, processed: true, accountId: account, runId: runId, now: now)
        return (type, .applied, account)
    }
}
