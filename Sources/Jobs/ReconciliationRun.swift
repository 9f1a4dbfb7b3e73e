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

/// One `run` or `backfill`: verify the selected accounts' receipts with Apple, plan the
/// corrections, check the safety limit, apply, report.
///
/// Pages of accounts are read while earlier accounts are verified; results are written in
/// batches (one transaction each) by a writer of its own, so Apple requests keep flowing while
/// the database works. Memory is bounded by the in-flight window and two pending batches, not by
/// the number of accounts.
///
/// The run first plans (receipt statuses, ledger and planned corrections are committed batch by
/// batch), then applies the planned corrections in batches, each entitlement change together
/// with its correction. A run killed at any point leaves whole batches only; the next run takes
/// over the planned corrections, verifies their accounts again and applies only its own fresh plan.
public final class ReconciliationRun: Sendable {
    /// How a run ended, for the exit status.
    public enum Ending: Sendable, Equatable {
        case completed
        /// Stopped by SIGTERM/SIGINT after finishing in-flight work.
        case interrupted
        /// The revoke ratio was over the limit: nothing applied.
        case aborted
        /// Apple kept rejecting the shared secret.
        case sharedSecretRejected
    }

    let options: RunOptions
    /// The run's sessions with the database: the lock's, the reader's, the writer's.
    let sessions: RunSessions
    let client: VerifyReceiptClient
    /// The App Store Server API, for `--source server-api`.
    let serverAPI: ServerAPIClient?
    /// One verifier of Apple's signed data for the run, notifications and the Server API alike:
    /// a chain verified once is not verified again (a bad root fails the run where it is used).
    let signedData: Result<SignedDataVerifier, SignedDataVerifier.BadRoot>
    let logger: Logger
    let stopRequested = Locked(false)
    /// Set when the writer failed: the producer stops taking accounts.
    let writerFailed = Locked(false)
    let secretGuard: SharedSecretGuard

    /// Checks the password of server notifications; never logged.
    let sharedSecret: String
    /// Told a rolling run's plan before any account is verified (`run --dry-run` prints it).
    let planned: (@Sendable (SchedulePlan) -> Void)?
    /// Told, on a first night, what the plan takes away per product before anything is applied.
    let firstNightLosses: (@Sendable (FirstNightLosses) -> Void)?

    public init(options: RunOptions, sessions: RunSessions, client: VerifyReceiptClient, serverAPI: ServerAPIClient? = nil,
                sharedSecret: String, logger: Logger, sharedSecretRejectionLimit: Int = 20,
                planned: (@Sendable (SchedulePlan) -> Void)? = nil, firstNightLosses: (@Sendable (FirstNightLosses) -> Void)? = nil) {
        self.planned = planned
        self.firstNightLosses = firstNightLosses
        self.serverAPI = serverAPI
        signedData = Result { () throws(SignedDataVerifier.BadRoot) in try SignedDataVerifier(configuration: options.signedDataConfiguration) }
        self.options = options
        self.sharedSecret = sharedSecret
        self.sessions = sessions
        self.client = client
        self.logger = logger
        secretGuard = SharedSecretGuard(limit: sharedSecretRejectionLimit, appleStop: client.gateway.appleStop)
    }

    /// Asks the run to stop taking new accounts; in-flight work is finished and committed.
    public func requestStop() {
        stopRequested.withLock { $0 = true }
    }

    var shouldStop: Bool {
        stopRequested.withLock { $0 } || writerFailed.withLock { $0 } || secretGuard.isTripped
    }

    /// Runs to the end and returns the summary (also stored in `iap.reconciliation_runs`).
    /// Cancelling the task stops the run as SIGTERM does: no new accounts, `interrupted`.
    public func run() async throws -> (summary: RunSummary, ending: Ending) {
        guard try await sessions.acquireLock(shard: options.selection.shard) else { throw RunLocked() }
        do {
            let result = try await withTaskCancellationHandler {
                try await runHoldingLock()
            } onCancel: {
                requestStop()
            }
            await StatementStop.uncancelled { await sessions.releaseLock() }
            return result
        } catch {
            await StatementStop.uncancelled { await sessions.releaseLock() }
            throw error
        }
    }

    /// Makes sure the run still holds its lock before it writes: after the lock's connection was
    /// lost (a server restart) the lock is gone with it, so it is taken again on the new
    /// connection, or the run stops if another run took it meanwhile.
    func ensureLockHeld(logger: Logger) async throws {
        try await withDatabaseRetry(logger: logger) {
            if try await sessions.holdsLock(shard: options.selection.shard) { return }
            guard try await sessions.acquireLock(shard: options.selection.shard) else { throw RunLockLost() }
            logger.warning("run.lock_retaken", metadata: ["run.reason": "the connection holding the run lock was lost"])
        }
    }

    /// The phases in order: the run's row, what comes before verifying (adoption, notifications,
    /// the report files), verifying and planning, applying, the ending written everywhere.
    func runHoldingLock() async throws -> (summary: RunSummary, ending: Ending) {
        let now = Date()
        let (reader, writer) = (sessions.reader, sessions.writer)
        // Refused before the run's row: a first night nobody asked for leaves nothing behind.
        let adoption = try await judgeFirstNight(reader: reader)
        var summary = try await startRun(now: now, writer: writer)
        var logger = self.logger
        logger[metadataKey: "run.id"] = .stringConvertible(summary.runId)
        let context = RunContext(runId: summary.runId, now: now, reader: reader, writer: writer, logger: logger, adoption: adoption)
        logger.info("run.started", metadata: [
            "run.kind": "\(options.kind.rawValue)", "run.dry_run": .stringConvertible(options.isDryRun), "run.shard": "\(options.shardText ?? "all")",
        ])

        let report: RunReportWriter
        do {
            report = try await prepare(context, summary: &summary)
        } catch {
            try await recordFailure(error, summary: &summary, writer: writer, report: nil)
        }

        let ending: Ending
        do {
            let rules = EntitlementRules(catalog: try await reader.catalog(), sandboxPolicy: options.sandboxPolicy)
            let selection = try await plannedSelection(context, summary: &summary)
            summary = try await verifyAndPlan(context, rules: rules, selection: selection, summary: summary, report: report)
            ending = try await applyWithinSafetyLimit(context, summary: &summary)
        } catch {
            try await recordFailure(error, summary: &summary, writer: writer, report: report)
        }

        // The run's ending lands whatever a stop cancels (docs/operating.md, "Stopping a statement").
        try await StatementStop.uncancelled { try await finish(ending, summary: &summary, report: report, context) }
        return (summary, ending)
    }

    /// The run's row in `iap.reconciliation_runs`, with its options; the summary starts from it.
    func startRun(now: Date, writer: ReconciliationStore) async throws -> RunSummary {
        var summary = RunSummary()
        summary.kind = options.kind
        summary.isDryRun = options.isDryRun
        summary.startedAt = now
        summary.shard = options.shardText
        summary.runId = try await writer.createRun(
            kind: options.kind, isDryRun: options.isDryRun, startedAt: now, shard: options.shardText,
            options: OptionsRecord(options))
        return summary
    }

}

/// What every phase of one run reads, made once when the run starts: its id, its one clock reading
/// (every decision of the run is made at `now`), its two sessions (pages are read on one while
/// batches are written on the other) and its logger, which carries the run's id.
struct RunContext: Sendable {
    let runId: Int64
    let now: Date
    let reader: ReconciliationStore
    let writer: ReconciliationStore
    let logger: Logger
    /// Whether the app's access was imported, and when the first night began: which accounts'
    /// first rows that grant nothing are revokes.
    let adoption: Adoption
}

/// The options as the run row records them (never the shared secret).
struct OptionsRecord: Encodable {
    var kind: RunKind
    var dryRun: Bool
    var concurrency: Int
    var requestsPerSecond: Double?
    var maxAttempts: Int
    var sandbox: String
    var expiryLagSeconds: Double
    var maxRevokeRatio: Double
    var revokeRatioMinimum: Int
    var shard: String?
    var excludeOldTransactions: Bool

    init(_ options: RunOptions) {
        kind = options.kind
        dryRun = options.isDryRun
        concurrency = options.concurrency
        requestsPerSecond = options.requestsPerSecond
        maxAttempts = options.policy.maximumAttempts
        sandbox = options.sandboxPolicy.rawValue
        expiryLagSeconds = options.expiryLag.timeInterval
        maxRevokeRatio = options.maximumRevokeRatio
        revokeRatioMinimum = options.revokeRatioMinimumAccounts
        shard = options.shardText
        excludeOldTransactions = options.policy.excludeOldTransactions
    }
}

