import AppStoreModels
import CivilCalendar
import Foundation
import Logging
import Reconciliation
import SignedData
import Storage

/// Processes the stored App Store Server Notifications, v1 and V2 (docs/notifications.md),
/// oldest first, each in one transaction with its effects. Notifications are hints: they bring
/// cancellations (and, from V2, prices) into the ledger and make the account's receipts due now,
/// and Apple's answer in the same run decides the entitlements. Nothing of a V2 notification is
/// used before every signed part of it has verified.
struct NotificationProcessor: Sendable {
    var store: NotificationStore
    var sharedSecret: String
    var verifier: SignedDataVerifier
    /// Unmatched notifications are retried until they are this old, then given up.
    var maximumAge: Duration
    var logger: Logger

    /// Processes every unprocessed notification and adds its counts to `summary`: those never
    /// started first, then the suspects (a process died on them, or `--retry-quarantined` released
    /// them), so that one still poisonous stops the run only once the others are done. A
    /// notification another process held (the consumption job, another shard) is tried once more
    /// at the end, and counted if still held: the next run takes it. `storedAfter`: only those
    /// stored after that id (what the notification history added, after a first pass).
    func process(runId: Int64, now: Date, storedAfter: Int64? = nil, summary: inout RunSummary) async throws {
        var held: [NotificationStore.Pending] = []
        for suspects in [false, true] {
            var after: (Date, Int64)?
            while true {
                let page = try await withDatabaseRetry(logger: logger) { [after] in
                    try await store.unprocessed(after: after, suspects: suspects, storedAfter: storedAfter, limit: 500)
                }
                guard let last = page.last else { break }
                after = (last.receivedAt, last.id)
                for pending in page where try await !processOne(pending, runId: runId, now: now, summary: &summary) {
                    held.append(pending)
                }
            }
        }
        var stillHeld: [Int64] = []
        for pending in held where try await !processOne(pending, runId: runId, now: now, summary: &summary) {
            stillHeld.append(pending.id)
        }
        if !stillHeld.isEmpty {
            summary.notificationsHeld = stillHeld.count
            logger.warning("notification.held", metadata: [
                "notification.count": .stringConvertible(stillHeld.count), "notification.ids": "\(stillHeld.prefix(20).map(String.init).joined(separator: ","))",
            ])
        }
        let quarantined = try await withDatabaseRetry(logger: logger) { try await store.quarantinedNow(limit: 1_000) }
        summary.notificationsQuarantined = quarantined.listed.isEmpty ? nil : quarantined.listed
        summary.notificationsQuarantinedCount = quarantined.count
    }

    /// One notification: started (counted), then processed in its transaction. False when another
    /// process held it: its start is taken back, it was not processed.
    private func processOne(_ pending: NotificationStore.Pending, runId: Int64, now: Date, summary: inout RunSummary) async throws -> Bool {
        // Counted before the work, in a statement of its own: a process that dies on this
        // notification leaves the count, and the third such start sets it aside.
        let start = try await withDatabaseRetry(logger: logger) {
            try await store.start(pending.id, runId: runId, now: now)
        }
        switch start {
        case .skip: return true
        case .held: return false
        case .quarantined(let reason):
            logger.error("notification.quarantined", metadata: ["notification.id": .stringConvertible(pending.id), "notification.reason": "\(reason)"])
            return true
        case .process: break
        }
        TestFault.dieIfPoison(notificationId: pending.id)
        let processed = try await withDatabaseRetry(logger: logger) {
            try await store.process(pending.id, runId: runId, now: now) { tx in try await process(pending, tx) }
        }
        // Held by another transaction (or processed meanwhile): not this run's work after all.
        guard let result = processed else {
            try await withDatabaseRetry(logger: logger) { try await store.takeBackStart(pending.id, runId: runId) }
            return try await withDatabaseRetry(logger: logger) { try await store.isProcessed(pending.id) }
        }
        summary.notifications[result.label, default: [:]][result.outcome, default: 0] += 1
        if result.type == "CONSUMPTION_REQUEST" && summary.consumptionRequests.count < 1_000 {
            summary.consumptionRequests.append("notification \(pending.id)" + (result.account.map { ", account \($0)" } ?? ""))
        }
        if result.outcome == .rejected, let reason = result.reason, (summary.notificationsRejected?.count ?? 0) < 1_000 {
            summary.notificationsRejected = (summary.notificationsRejected ?? []) + ["notification \(pending.id): \(reason)"]
        }
        return true
    }

    /// How one notification came out.
    struct Processed {
        /// Apple's notificationType, where it could be read (and trusted).
        var type: String
        /// The report's row: the type, `v2 TYPE/SUBTYPE` for V2.
        var label: String
        var outcome: NotificationOutcome
        var account: String?
        var reason: String?
    }

    /// One notification, in its transaction (`tx`). Locks are taken in a batch's order
    /// (receipts, then the ledger), so the two never deadlock.
    private func process(_ pending: NotificationStore.Pending, _ tx: NotificationWrite) async throws -> Processed {
        let body = Array(pending.body.utf8)
        if let signedPayload = NotificationV2Body.signedPayload(body) {
            return try await processV2(pending, signedPayload: signedPayload, tx)
        }
        let notification: ServerNotification
        do {
            notification = try ServerNotification.decode(body)
        } catch {
            try await tx.record(.invalid, reason: "\(error)")
            logger.warning("notification.invalid", metadata: ["notification.id": .stringConvertible(pending.id), "notification.reason": "\(error)"])
            return Processed(type: "(none)", label: "(none)", outcome: .invalid)
        }
        let type = notification.notificationType
        guard notification.passwordMatches(sharedSecret) else {
            let reason = "the password is not the shared secret"
            try await tx.record(.rejected, reason: reason)
            logger.warning("notification.rejected", metadata: [
                "notification.id": .stringConvertible(pending.id), "notification.type": "\(type)", "notification.reason": "\(reason)",
            ])
            return Processed(type: type, label: type, outcome: .rejected, reason: reason)
        }
        guard let account = try await matchedAccount(pending, notification.originalTransactionIds, tx) else {
            return Processed(type: type, label: type, outcome: .unmatched)
        }
        let environment = notification.appleEnvironment ?? .production
        try await tx.upsertLedger(notification.unifiedReceipt.latestReceiptInfo.map {
            LedgerEntry(accountId: account, transaction: $0, environment: environment, source: .notificationV1)
        })
        try await tx.record(.applied, accountId: account)
        return Processed(type: type, label: type, outcome: .applied, account: account)
    }

    /// A V2 notification (docs/notifications.md, "Signed data and Server Notifications V2"): verified whole first, then as v1 with its one transaction.
    private func processV2(_ pending: NotificationStore.Pending, signedPayload: String, _ tx: NotificationWrite) async throws -> Processed {
        let verified: VerifiedNotificationV2
        do {
            verified = try await verifier.verifyNotification(signedPayload: signedPayload)
        } catch {
            // Refused by the app's configuration, not by Apple's signature: kept with the configuration's
            // fingerprint, examined again by a run configured otherwise.
            let configuration = error.check.isConfiguration ? verifier.configuration.fingerprint : nil
            try await tx.record(.rejected, reason: error.reason, rejectedConfiguration: configuration)
            logger.warning("notification.rejected", metadata: [
                "notification.id": .stringConvertible(pending.id), "notification.version": "2", "notification.reason": "\(error)",
            ])
            // Nothing of it is trusted, its type included.
            return Processed(type: "(unverified)", label: "v2 (unverified)", outcome: .rejected, reason: error.reason)
        }
        let payload = verified.payload
        let type = payload.rawNotificationType  // counted and logged as Apple wrote it, a type added later included
        let label = payload.label
        if let uuid = payload.notificationUUID, try await tx.wasProcessedBefore(notificationUUID: uuid) {
            try await tx.record(.duplicate)
            return Processed(type: type, label: label, outcome: .duplicate)
        }
        let ids = [verified.transaction.map { $0.originalTransactionId ?? $0.transactionId }, verified.renewalInfo?.originalTransactionId]
            .compactMap { $0 }
        guard payload.notificationType != .test, !ids.isEmpty else {
            try await tx.record(.recorded)
            return Processed(type: type, label: label, outcome: .recorded)
        }
        guard let account = try await matchedAccount(pending, ids, tx) else {
            return Processed(type: type, label: label, outcome: .unmatched)
        }
        if let transaction = verified.transaction {
            let environment = AppleEnvironment(appleName: transaction.rawEnvironment ?? payload.rawEnvironment) ?? .production
            // Apple's word as of the notification's signedDate (verified): a later one wins, an
            // older one (a REFUND retried after its REFUND_REVERSED) changes nothing; a reversal
            // (its transaction without a revocation) clears the refund and is journaled then.
            try await tx.upsertLedger([LedgerEntry(
                accountId: account, transaction: transaction.ledgerTransaction, environment: environment, source: .notificationV2,
                signed: transaction.signedTerms, asOf: payload.signedDate ?? transaction.signedDate ?? tx.now)])
        }
        try await tx.record(.applied, accountId: account)
        return Processed(type: type, label: label, outcome: .applied, account: account)
    }

    /// The account owning one of these original transaction ids (the ledger's), every holder
    /// made due now (docs/notifications.md); nil (and the notification left for later runs, or
    /// given up when too old) when none does.
    private func matchedAccount(_ pending: NotificationStore.Pending, _ ids: [String], _ tx: NotificationWrite) async throws -> String? {
        let holders = try await tx.accounts(owning: ids)
        guard let account = holders.first else {
            let givenUp = tx.now.timeIntervalSince(pending.receivedAt) > maximumAge.timeInterval
            try await tx.record(.unmatched, processed: givenUp)
            return nil
        }
        for holder in holders { try await tx.requestReverification(accountId: holder) }
        return account
    }
}
