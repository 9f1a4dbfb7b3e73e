import AppStore
import AppStoreModels
import Foundation
import Throttling
import Logging
import Reconciliation
import SignedData
import Storage
import Locking

/// The safety limit, applying, and how the run ended, written everywhere.
extension ReconciliationRun {
    /// Retires the taken-over corrections this run did not replace, checks the safety limit over
    /// the accounts the run verified (with its night's other shards), then applies the planned
    /// corrections batch by batch, or applies nothing and ends `aborted`
    /// (docs/guarantees.md, "Safety limit").
    func applyWithinSafetyLimit(_ context: RunContext, summary: inout RunSummary) async throws -> Ending {
        let (now, writer, logger) = (context.now, context.writer, context.logger)
        if secretGuard.hasRejected(accountsVerified: summary.accountsVerified) { return .sharedSecretRejected }
        let ending: Ending = stopRequested.withLock { $0 } ? .interrupted : .completed
        guard !options.isDryRun else {
            try await announceFirstNightLosses(context, summary: summary)
            return ending
        }

        let (runId, shard) = (summary.runId, options.selection.shard)
        try await ensureLockHeld(logger: logger)
        if summary.correctionsTakenOver > 0 {
            let retired = try await withDatabaseRetry(logger: logger) { try await writer.retireTakenOverCorrections(runId: runId) }
            summary.correctionsSuperseded += retired
        }
        // The losses of the plan the limit judges: taken-over plans not verified again are retired first.
        try await announceFirstNightLosses(context, summary: summary)
        let planned = try await withDatabaseRetry(logger: logger) { try await writer.plannedRevokes(runId: runId) }
        let limit = try await revokeRatioCount(
            RevokeRatioCount(accounts: summary.accountsVerified, revokedAccounts: planned.revokedAccounts), tookOver: summary.correctionsTakenOver > 0,
            context)
        summary.revokeRatio = limit
        if limit.nightAccounts >= options.revokeRatioMinimumAccounts && limit.ratio > options.maximumRevokeRatio {
            var shards = ""
            if let shard, let siblings = limit.siblingShards {
                shards = " (shard \(shard) and \(siblings) other shard\(siblings == 1 ? "" : "s") of its night counted together)"
            }
            let percent = { (share: Double) in String(format: "%.1f%%", share * 100) }
            summary.error = "\(limit.revokedAccounts) of \(limit.accounts) verified accounts (\(percent(limit.ratio)))\(shards) would lose an entitlement, "
                + "over the --max-revoke-ratio of \(percent(options.maximumRevokeRatio)): nothing was applied; the planned corrections are kept for review"
            logger.error("run.aborted", metadata: ["run.reason": "\(summary.error!)"])
            return .aborted
        }
        var after: Int64 = 0
        while true {
            let cursor = after
            try await ensureLockHeld(logger: logger)
            let result = try await withDatabaseRetry(logger: logger) {
                try await writer.applyPlanned(runId: runId, afterId: cursor, limit: options.batchSize, now: now)
            }
            guard let last = result.lastId else { break }
            after = last
            summary.correctionsApplied += result.applied
            summary.correctionsSuperseded += result.superseded
        }
        return ending
    }

    /// What the safety limit judges: the accounts this run verified (an account Apple did not
    /// answer is no evidence of health) and those of them that would lose an entitlement; a shard
    /// worker adds its night's other shards and counts towards the minimum as the whole night
    /// (docs/guarantees.md, "Safety limit"). Records the run's own counts for its siblings first.
    /// A run that took plans over continues their night: its accounts count as the most that night
    /// verified, so re-verifying only the plan's accounts (a re-run after an abort, a backfill of
    /// them) is judged as that night was. A run stopped early (SIGTERM) saw only part of its night:
    /// it is judged as if the minimum were met.
    func revokeRatioCount(_ own: RevokeRatioCount, tookOver: Bool, _ context: RunContext) async throws -> RevokeRatioCount {
        var night = try await shardNight(own, context)
        if tookOver {
            let (runId, now, writer) = (context.runId, context.now, context.writer)
            let continued = try await withDatabaseRetry(logger: context.logger) {
                try await writer.accountsOfTakenOverNight(runId: runId, now: now)
            }
            night.accounts = max(night.accounts, continued)
            night.nightAccounts = max(night.nightAccounts, continued)
        }
        if stopRequested.withLock({ $0 }) { night.nightAccounts = max(night.nightAccounts, options.revokeRatioMinimumAccounts) }
        return night
    }

    func shardNight(_ own: RevokeRatioCount, _ context: RunContext) async throws -> RevokeRatioCount {
        let (runId, now, writer, logger) = (context.runId, context.now, context.writer, context.logger)
        try await withDatabaseRetry(logger: logger) {
            try await writer.recordPlanned(runId: runId, accounts: own.accounts, revokedAccounts: own.revokedAccounts, at: Date())
        }
        guard let shard = options.selection.shard else { return own }
        let siblings = try await withDatabaseRetry(logger: logger) { try await writer.siblingShards(runId: runId, shard: shard, now: now) }
        var night = own
        night.accounts += siblings.accounts
        night.revokedAccounts += siblings.revokedAccounts
        night.siblingShards = siblings.shards
        // The hash spreads accounts evenly across shards: one shard's accounts times N is its night.
        night.nightAccounts = max(own.accounts * shard.count, night.accounts)
        return night
    }

    /// Writes how the run ended to its row, its report files, the metrics file and the log. Work
    /// already committed stays committed when the report cannot be written; the error says so.
    func finish(_ ending: Ending, summary: inout RunSummary, report: RunReportWriter, _ context: RunContext) async throws {
        let (writer, logger) = (context.writer, context.logger)
        summary.appleStormPauses = client.gateway.stormGate.pauses
        // The process did not die: no start this run counted and left was a death.
        let runId = summary.runId
        try await withDatabaseRetry(logger: logger) { try await writer.takeBackStarts(runId: runId) }
        switch ending {
        case .completed: summary.status = .completed
        case .interrupted: summary.status = .interrupted
        case .aborted: summary.status = .aborted
        case .sharedSecretRejected:
            summary.status = .failed
            summary.error = secretGuard.unauthorizedReason ?? SharedSecretRejected(count: secretGuard.total).description
        }
        summary.finishedAt = Date()
        if let usage = serverAPI?.budget?.usage, !usage.isEmpty {
            let seconds = summary.finishedAt!.timeIntervalSince(summary.startedAt)
            summary.apiRequests = Dictionary(uniqueKeysWithValues: usage.map { key, used in
                (key, APIEndpointUsage(budgetPerSecond: used.budget, requests: used.requests, throttled: used.throttled, seconds: seconds))
            })
        }
        if (options.selection.shard?.index ?? 0) == 0 {
            // Every receipt failing --escalate-after runs in a row, whichever run selected it: one worker says it.
            let minimum = options.persistentFailure.escalateAfter
            let failing = try await withDatabaseRetry(logger: logger) { try await writer.failingReceipts(minimumFailures: minimum, limit: 1_000) }
            (summary.accountsEscalated, summary.accountsEscalatedCount) = (failing.listed.isEmpty ? nil : failing.listed, failing.count)
            if failing.count > 0 {
                logger.warning("account.failing_for_runs", metadata: [
                    "account.count": .stringConvertible(failing.count), "account.runs_in_a_row": .stringConvertible(minimum),
                ])
            }
        }
        let finishedAt = summary.finishedAt!
        let answers = try await withDatabaseRetry(logger: logger) {
            try await writer.consumptionAnswers(since: finishedAt.addingTimeInterval(-24 * 3600), now: finishedAt)
        }
        summary.consumptionAnswers = answers.outcomes
        summary.consumptionOldestUnansweredSeconds = answers.oldestOpen.map { Int(max(0, finishedAt.timeIntervalSince($0))) } ?? 0
        let finished = summary
        try await withDatabaseRetry(logger: logger) { try await writer.updateRun(finished) }
        do {
            try await report.finish(summary: summary, store: writer)
        } catch {
            let missing = ReportNotWritten(runId: summary.runId, status: summary.status, cause: "\(error)")
            summary.error = [summary.error, missing.description].compactMap { $0 }.joined(separator: "; ")
            let recorded = summary
            try? await writer.updateRun(recorded)
            await publishMetrics(summary)
            throw missing
        }
        try writeMetrics(summary)
        await pushMetrics(summary)
        logger.info("run.finished", metadata: [
            "run.status": "\(summary.status.rawValue)", "run.accounts": .stringConvertible(summary.accountsProcessed),
            "run.corrections": .stringConvertible(summary.totalCorrections), "run.applied": .stringConvertible(summary.correctionsApplied),
            "apple.requests": .stringConvertible(summary.appleRequests),
        ])
    }

    /// Records the run as `failed` (its committed plan is taken over by the next run), writes what
    /// report it can, and rethrows.
    func recordFailure(_ error: any Error, summary: inout RunSummary, writer: ReconciliationStore,
                               report: RunReportWriter?) async throws -> Never {
        // A stop cancels the statement the run still waits on half a second later (a lock, a
        // slow read): its transaction is rolled back and the run ends interrupted, its committed
        // batches whole (docs/operating.md, "Stopping a statement"). The stop signal is known to
        // the database layer before the run hears of it.
        let stopped = (stopRequested.withLock { $0 } || StatementStop.isStopping) && StatementStop.isCancellation(error)
        // What follows must land, a stop or a second signal notwithstanding.
        summary = await StatementStop.uncancelled { [summary] in
            var summary = summary
            // The summary in hand may predate batches committed since (a failure while verifying):
            // each batch stored the run's counts with it, and those are what was done.
            if let stored = try? await writer.runSummary(runId: summary.runId), stored.accountsProcessed > summary.accountsProcessed {
                summary = stored
            }
            summary.status = stopped ? .interrupted : .failed
            summary.error = stopped
                ? "stopped while waiting on the database; that statement was cancelled and its transaction rolled back: \(error)" : "\(error)"
            summary.finishedAt = Date()
            // The accounts and notifications it began and did not finish did not kill the process.
            try? await writer.takeBackStarts(runId: summary.runId)
            try? await writer.updateRun(summary)
            try? await report?.finish(summary: summary, store: writer)
            return summary
        }
        await publishMetrics(summary)
        throw error
    }

    /// The metrics file and the Pushgateway, where either fails: the run's ending is what matters now.
    func publishMetrics(_ summary: RunSummary) async {
        try? writeMetrics(summary)
        await pushMetrics(summary)
    }

    /// Pushes the run's metrics (`--metrics-push`). A push that fails is logged and changes
    /// nothing else: the run's work is committed, and the stale success time raises the alert.
    func pushMetrics(_ summary: RunSummary) async {
        guard let push = options.metricsPush else { return }
        let text = options.isDryRun ? RunReport.dryRunMetrics(summary, previous: nil) : RunReport.metrics(summary, previous: nil)
        await push.publish(text, kind: summary.kind.rawValue, shard: summary.shard, logger: logger)
    }

    func writeMetrics(_ summary: RunSummary) throws {
        guard let file = options.metricsFile else { return }
        let previous = try? String(contentsOf: file, encoding: .utf8)
        // A dry run stands in for no night: the alerts keep reading the last real one.
        let text = options.isDryRun ? RunReport.dryRunMetrics(summary, previous: previous) : RunReport.metrics(summary, previous: previous)
        try RunReportWriter.write(text, to: file)
    }

}

/// The run finished and its corrections are committed, but its report files could not all be
/// written (a full disk): exit 1, so the operator looks, and `report` writes them later.
public struct ReportNotWritten: Error, CustomStringConvertible {
    public var runId: Int64
    public var status: RunStatus
    public var cause: String
    public var description: String {
        "run \(runId) ended \(status) and its work is committed, but its report is incomplete: \(cause); " +
            "once there is room, write summary.md, summary.json or corrections.csv with " +
            "`receipt-reconciler report \(runId) --format md|json|csv --output FILE`"
    }
}
