import AppStore
import AppStoreModels
import CivilCalendar
import Foundation
import Locking
import Logging
import Reconciliation
import SignedData
import Storage
import Throttling

/// Before verifying: taking over, notifications and their history, the report files, and a
/// rolling run's plan.
extension ReconciliationRun {
    /// Before verifying: takes over the planned corrections of runs that died (their accounts made
    /// due, to be verified again), processes the
    /// stored notifications, and opens the report files (without a report the run does not start).
    func prepare(_ context: RunContext, summary: inout RunSummary) async throws -> RunReportWriter {
        let (now, writer, logger) = (context.now, context.writer, context.logger)
        if !options.isDryRun {
            summary.correctionsTakenOver = try await writer.takeOverInterruptedRuns(
                runId: summary.runId, shard: options.selection.shard, now: now, takingAborted: !options.selection.isNotificationsAlone)
            if summary.correctionsTakenOver > 0 {
                logger.notice("run.took_over", metadata: ["run.corrections": .stringConvertible(summary.correctionsTakenOver)])
            }
        }
        if !options.isDryRun {
            // What a migration asked the journal to look at again (Migrations/0024); nothing on most nights.
            let events = try await withDatabaseRetry(logger: logger) { try await writer.drainJournalBacklog() }
            if events > 0 { logger.notice("finance.backlog_recorded", metadata: ["finance.events": .stringConvertible(events)]) }
        }
        if !options.isDryRun && options.retriesQuarantined {
            let released = try await writer.releaseQuarantinedAccounts(now: now)
            logger.notice("account.quarantine_released", metadata: ["account.count": .stringConvertible(released)])
        }
        if !options.isDryRun && options.processesNotifications {
            try await ensureLockHeld(logger: logger)
            if options.retriesQuarantined {
                let released = try await sessions.notifications.releaseQuarantined()
                logger.notice("notification.quarantine_released", metadata: ["notification.count": .stringConvertible(released)])
            }
            let verifier = try signedData.get()
            let reopened = try await withDatabaseRetry(logger: logger) {
                try await sessions.notifications.reopenRejected(configuration: verifier.configuration.fingerprint, all: options.retriesRejected)
            }
            if reopened > 0 {
                summary.notificationsReexamined = reopened
                logger.notice("notification.rejected_reexamined", metadata: [
                    "notification.count": .stringConvertible(reopened), "notification.why": "\(options.retriesRejected ? "--retry-rejected" : "the app's configuration changed")",
                ])
            }
            let processor = NotificationProcessor(
                store: sessions.notifications, sharedSecret: sharedSecret,
                verifier: verifier, maximumAge: options.notificationMaximumAge, logger: logger)
            // What the app server stored first, then the history, then what the history added: a
            // forged or mangled copy the app server stored under a real notificationUUID is rejected
            // before the history is read, so Apple's own copy is stored beside it, not kept out.
            // The second pass takes only rows stored since the first: an unmatched notification, left
            // due by the first, is not processed (nor counted) twice in one run.
            try await processor.process(runId: summary.runId, now: now, summary: &summary)
            let storedBefore = try await withDatabaseRetry(logger: logger) { try await sessions.notifications.lastStoredId() }
            if try await readNotificationHistory(context, summary: &summary) {
                try await processor.process(runId: summary.runId, now: now, storedAfter: storedBefore, summary: &summary)
            }
            try await writer.updateRun(summary)
        }
        let report = try RunReportWriter(
            directory: options.reportDirectory ?? URL(filePath: "reports").appending(path: "run-\(summary.runId)"),
            crossCheck: options.sources.crossChecks)
        try report.appendQuarantined(summary.notificationsQuarantined ?? [])
        return report
    }

    /// Get Notification History into `iap.notifications`, before they are processed: one worker
    /// reads it (shard 0, or the only one), for each environment, within the API's budget.
    /// True when it stored a notification.
    @discardableResult
    func readNotificationHistory(_ context: RunContext, summary: inout RunSummary) async throws -> Bool {
        let (now, logger) = (context.now, context.logger)
        guard options.readsNotificationHistory, let serverAPI, (options.selection.shard?.index ?? 0) == 0 else { return false }
        let feed = NotificationHistoryFeed(
            client: serverAPI, store: sessions.notifications,
            firstSince: options.notificationHistorySince, secretGuard: secretGuard, logger: logger)
        var reads: [NotificationHistoryRead] = []
        for environment in [AppleEnvironment.production, .sandbox] {
            reads.append(try await feed.pull(environment, now: now))
            summary.appleRequests += reads.last!.requests
        }
        summary.notificationHistory = reads
        return reads.contains { $0.stored > 0 }
    }

    /// The accounts this run takes: those selected, or, for a rolling run, its plan written to
    /// `iap.run_schedule` (notified, at risk, then the full cycle, as many as the window holds at
    /// the API budget), said in the log and to `planned` before any account is verified.
    func plannedSelection(_ context: RunContext, summary: inout RunSummary) async throws -> AccountSelection {
        let (now, writer, logger) = (context.now, context.writer, context.logger)
        guard let rolling = options.rollingSchedule, case .due(let staleAfter) = options.selection.kind else { return options.selection }
        let budget = serverAPI?.budget ?? options.apiBudget()
        let budgets: [ServerAPIEndpoint: Double] = [.history: budget.budget(.init(.history, .production)), .statuses: budget.budget(.init(.statuses, .production))]
        let perAccount = try await withDatabaseRetry(logger: logger) { try await writer.measuredRequestsPerAccount() }
            ?? SchedulePlan.firstGuess
        let capacity = rolling.window.map {
            SchedulePlan.capacity(windowSeconds: $0.timeInterval, budgetPerSecond: budgets, requestsPerAccount: perAccount)
        }
        let (due, scheduled) = try await withDatabaseRetry(logger: logger) {
            try await writer.planSchedule(
                runId: summary.runId, shard: options.selection.shard, now: now, staleAfter: staleAfter, fullCycle: rolling.fullCycle,
                atRiskUntil: now.adding(options.expiryLag).addingTimeInterval(86_400), capacity: capacity)
        }
        let plan = SchedulePlan(
            due: due, scheduled: scheduled, windowSeconds: rolling.window?.timeInterval, capacity: capacity, requestsPerAccount: perAccount,
            budgetPerSecond: budgets, fullCycleSeconds: rolling.fullCycle.timeInterval, plannedAt: now)
        summary.schedule = plan
        logger.info("run.planned", metadata: [
            "run.scheduled": .stringConvertible(plan.totalScheduled), "run.due": .stringConvertible(plan.totalDue), "run.left": .stringConvertible(plan.leftForNextNight),
            "run.estimated_seconds": .stringConvertible(Int(plan.estimatedSeconds)),
        ])
        planned?(plan)
        return AccountSelection(kind: .scheduled(runId: summary.runId))
    }

}
