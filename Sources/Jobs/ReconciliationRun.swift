import AppStore
import AppStoreModels
import Foundation
import Throttling
import Logging
import Postgres
import Reconciliation
import Storage
import Locking

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
/// over the planned corrections and does not verify again what was committed.
public final class ReconciliationRun: Sendable {
    public struct Connections: Sendable {
        /// Holds the run lock for the whole run.
        public var lock: PostgresConnection
        public var reader: PostgresConnection
        public var writer: PostgresConnection

        public init(lock: PostgresConnection, reader: PostgresConnection, writer: PostgresConnection) {
            self.lock = lock
            self.reader = reader
            self.writer = writer
        }
    }

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
    let connections: Connections
    let client: VerifyReceiptClient
    let logger: Logger
    let stopRequested = Locked(false)
    /// Set when the writer failed: the producer stops taking accounts.
    let writerFailed = Locked(false)
    let secretRejections = Locked((consecutive: 0, total: 0))
    /// Consecutive 21004 answers that stop the run.
    let sharedSecretRejectionLimit: Int

    /// Checks the password of server notifications; never logged.
    let sharedSecret: String

    public init(options: RunOptions, connections: Connections, client: VerifyReceiptClient, sharedSecret: String, logger: Logger,
                sharedSecretRejectionLimit: Int = 20) {
        self.options = options
        self.sharedSecret = sharedSecret
        self.connections = connections
        self.client = client
        self.logger = logger
        self.sharedSecretRejectionLimit = sharedSecretRejectionLimit
    }

    /// Asks the run to stop taking new accounts; in-flight work is finished and committed.
    public func requestStop() {
        stopRequested.withLock { $0 = true }
    }

    var shouldStop: Bool {
        stopRequested.withLock { $0 } || writerFailed.withLock { $0 }
            || secretRejections.withLock { $0.consecutive >= sharedSecretRejectionLimit }
    }

    /// Runs to the end and returns the summary (also stored in `iap.reconciliation_runs`).
    public func run() async throws -> (summary: RunSummary, ending: Ending) {
        guard try await RunLock.tryAcquire(connections.lock, shard: options.selection.shard) else { throw RunLocked() }
        do {
            let result = try await runHoldingLock()
            await RunLock.release(connections.lock)
            return result
        } catch {
            await RunLock.release(connections.lock)
            throw error
        }
    }

    /// Makes sure the run still holds its lock before it writes: after the lock's connection was
    /// lost (a server restart) the lock is gone with it, so it is taken again on the new
    /// connection, or the run stops if another run took it meanwhile.
    func ensureLockHeld(logger: Logger) async throws {
        try await Self.retryingLostConnections(logger: logger) {
            if try await RunLock.isHeld(connections.lock, shard: options.selection.shard) { return }
            guard try await RunLock.tryAcquire(connections.lock, shard: options.selection.shard) else { throw RunLockLost() }
            logger.warning("run.lock_retaken", metadata: ["reason": "the connection holding the run lock was lost"])
        }
    }

    private func runHoldingLock() async throws -> (summary: RunSummary, ending: Ending) {
        let now = Date()
        let reader = ReconciliationStore(connection: connections.reader)
        let writer = ReconciliationStore(connection: connections.writer)
        var summary = RunSummary()
        summary.kind = options.kind
        summary.isDryRun = options.isDryRun
        summary.startedAt = now
        summary.shard = options.shardText
        summary.runId = try await writer.createRun(
            kind: options.kind, isDryRun: options.isDryRun, startedAt: now, shard: options.shardText,
            options: try PostgresJSON(encoding: OptionsRecord(options)))
        var logger = self.logger
        logger[metadataKey: "run.id"] = "\(summary.runId)"
        logger.info("run.started", metadata: [
            "run.kind": "\(options.kind.rawValue)", "run.dry_run": "\(options.isDryRun)", "run.shard": "\(options.shardText ?? "all")",
        ])

        let report: RunReportWriter
        do {
            if !options.isDryRun {
                summary.correctionsAdopted = try await writer.adoptInterruptedRuns(
                    runId: summary.runId, shard: options.selection.shard, now: now)
                if summary.correctionsAdopted > 0 {
                    logger.notice("run.adopted", metadata: ["corrections": "\(summary.correctionsAdopted)"])
                }
            }
            if !options.isDryRun && options.processesNotifications {
                try await ensureLockHeld(logger: logger)
                let processor = NotificationProcessor(
                    store: NotificationStore(connection: connections.writer), ledger: writer, sharedSecret: sharedSecret,
                    maximumAge: options.notificationMaximumAge, logger: logger)
                try await processor.process(runId: summary.runId, now: now, summary: &summary)
                try await writer.updateRun(summary)
            }
            // Without a report the run does not start.
            report = try RunReportWriter(
                directory: options.reportDirectory ?? URL(filePath: "reports").appending(path: "run-\(summary.runId)"))
        } catch {
            try await recordFailure(error, summary: &summary, writer: writer, report: nil)
        }

        let ending: Ending
        do {
            let rules = EntitlementRules(catalog: try await reader.catalog(), sandboxPolicy: options.sandboxPolicy)
            summary = try await verifyAndPlan(now: now, rules: rules, reader: reader, writer: writer, summary: summary,
                                              report: report, logger: logger)
            ending = try await applyWithinSafetyLimit(now: now, writer: writer, summary: &summary, logger: logger)
        } catch {
            try await recordFailure(error, summary: &summary, writer: writer, report: report)
        }

        summary.appleStormPauses = client.stormGate.pauses
        switch ending {
        case .completed: summary.status = .completed
        case .interrupted: summary.status = .interrupted
        case .aborted: summary.status = .aborted
        case .sharedSecretRejected:
            summary.status = .failed
            summary.error = SharedSecretRejected(count: secretRejections.withLock { $0.total }).description
        }
        summary.finishedAt = Date()
        let finished = summary
        try await Self.retryingLostConnections(logger: logger) { try await writer.updateRun(finished) }
        do {
            try await report.finish(summary: summary, store: writer)
        } catch {
            // The run's work is committed; only its files are missing. Say so on the run's row too.
            let missing = ReportNotWritten(runId: summary.runId, status: summary.status, cause: "\(error)")
            summary.error = [summary.error, missing.description].compactMap { $0 }.joined(separator: "; ")
            let recorded = summary
            try? await writer.updateRun(recorded)
            try? writeMetrics(summary)
            throw missing
        }
        try writeMetrics(summary)
        logger.info("run.finished", metadata: [
            "run.status": "\(summary.status.rawValue)", "accounts": "\(summary.accountsProcessed)",
            "corrections": "\(summary.totalCorrections)", "applied": "\(summary.correctionsApplied)",
            "apple.requests": "\(summary.appleRequests)",
        ])
        return (summary, ending)
    }

    /// Records the run as `failed` (its committed plan is taken over by the next run), writes what
    /// report it can, and rethrows.
    private func recordFailure(_ error: any Error, summary: inout RunSummary, writer: ReconciliationStore,
                               report: RunReportWriter?) async throws -> Never {
        summary.status = .failed
        summary.error = "\(error)"
        summary.finishedAt = Date()
        try? await writer.updateRun(summary)
        try? await report?.finish(summary: summary, store: writer)
        try? writeMetrics(summary)
        throw error
    }

    /// Checks the safety limit over every account the run counts (each once), then applies the
    /// planned corrections batch by batch, or applies nothing and ends `aborted`.
    private func applyWithinSafetyLimit(now: Date, writer: ReconciliationStore, summary: inout RunSummary,
                                        logger: Logger) async throws -> Ending {
        let rejectedSecret = secretRejections.withLock { state in
            state.consecutive >= sharedSecretRejectionLimit || (state.total > 0 && summary.accountsVerified == 0 && state.total >= 3)
        }
        if rejectedSecret { return .sharedSecretRejected }
        let ending: Ending = stopRequested.withLock { $0 } ? .interrupted : .completed
        guard !options.isDryRun else { return ending }

        let (runId, processed, shard) = (summary.runId, summary.accountsProcessed, options.selection.shard)
        let planned = try await Self.retryingLostConnections(logger: logger) { try await writer.plannedRevokes(runId: runId) }
        let accounts = summary.correctionsAdopted == 0 ? processed : try await Self.retryingLostConnections(logger: logger) {
            max(processed, try await writer.accountsCounted(runId: runId, shard: shard))
        }
        summary.accountsAdopted = accounts - processed
        let ratio = accounts == 0 ? 0 : Double(planned.revokedAccounts) / Double(accounts)
        if accounts >= options.revokeRatioMinimumAccounts && ratio > options.maximumRevokeRatio {
            summary.error = String(format: "%d of %d accounts (%.1f%%) would lose an entitlement, over the --max-revoke-ratio of %.1f%%: nothing was applied; the planned corrections are kept for review",
                                   planned.revokedAccounts, accounts, ratio * 100, options.maximumRevokeRatio * 100)
            logger.error("run.aborted", metadata: ["reason": "\(summary.error!)"])
            return .aborted
        }
        var after: Int64 = 0
        while true {
            let cursor = after
            try await ensureLockHeld(logger: logger)
            let result = try await Self.retryingLostConnections(logger: logger) {
                try await writer.applyPlanned(runId: runId, afterId: cursor, limit: options.batchSize, now: now)
            }
            guard let last = result.lastId else { break }
            after = last
            summary.correctionsApplied += result.applied
            summary.correctionsSuperseded += result.superseded
        }
        return ending
    }

    /// Runs `body` again when the database connection was lost (the server restarted, a network
    /// blip) or the server rolled its transaction back to break a deadlock: the connection
    /// reconnects on its next statement, and a transaction either committed whole or not at all
    /// (a batch counts itself, so one whose COMMIT landed unacknowledged is not written twice),
    /// so repeating it is safe. Gives up after about a minute.
    static func retryingLostConnections<Result>(logger: Logger, _ body: () async throws -> Result) async throws -> Result {
        var delay = Duration.milliseconds(500)
        for attempt in 1... {
            do {
                return try await body()
            } catch let error as PostgresError where (error.isConnectionError || error.isTransactionConflict) && attempt < 8 {
                logger.warning("database.retrying", metadata: ["attempt": "\(attempt)", "error": "\(error)"])
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(15))
            }
        }
        preconditionFailure("unreachable")
    }

    private func writeMetrics(_ summary: RunSummary) throws {
        guard let file = options.metricsFile else { return }
        let previous = try? String(contentsOf: file, encoding: .utf8)
        try RunReportWriter.write(RunReport.metrics(summary, previous: previous), to: file)
    }

    // MARK: - Phase 1: verify and plan

    /// One account's work and result.
    struct AccountWork: Sendable {
        var accountId: String
        var receipts: [StoredReceipt]
        var stored: [Entitlement]
    }

    struct AccountResult: Sendable {
        var accountId: String
        var counts: AccountOutcomeCounts
        var receiptUpdates: [ReceiptUpdate]
        var ledger: [LedgerEntry]
        var corrections: [Correction]
        var failures: [FailureRecord]
    }

    private func verifyAndPlan(
        now: Date, rules: EntitlementRules, reader: ReconciliationStore, writer: ReconciliationStore, summary: RunSummary,
        report: RunReportWriter, logger: Logger
    ) async throws -> RunSummary {
        let batches = AsyncStream<[AccountResult]>.makeStream()
        let pendingBatches = ConcurrencyLimiter(limit: 2)
        let window = max(options.concurrency * 2, 16)
        let diff = EntitlementDiff(expiryLag: options.expiryLag)
        // The total is only worth a query for a person watching a terminal.
        let total = ProgressReporter.isTerminal ? try? await reader.countAccounts(selection: options.selection, now: now) : nil

        return try await withThrowingTaskGroup(of: RunSummary.self) { group in
            // The writer: one transaction per batch, counts included, then the failures file.
            let progress = ProgressReporter(interval: options.progressInterval, total: total, logger: logger)
            group.addTask { [options] in
                var summary = summary
                var failure: (any Error)?
                var sequence = 0
                for await batch in batches.stream {
                    // Keep draining after a failure, so the producer is never left waiting.
                    defer { pendingBatches.release() }
                    guard failure == nil else { continue }
                    var next = summary
                    for result in batch { next.add(result.counts) }
                    sequence += 1
                    do {
                        try await Self.retryingLostConnections(logger: logger) { [sequence] in
                          try await self.ensureLockHeld(logger: logger)
                          try await writer.connection.withTransaction { _ in
                            // A retry after a lost COMMIT acknowledgement finds the batch written already.
                            guard try await writer.claimBatch(runId: summary.runId, sequence: sequence) else { return }
                            try await writer.writeBatch(
                                runId: summary.runId, startedAt: now, receipts: batch.flatMap(\.receiptUpdates),
                                ledger: batch.flatMap(\.ledger),
                                corrections: batch.flatMap(\.corrections),
                                verifiedAccounts: batch.filter { $0.counts.outcome == .verified }.map(\.accountId),
                                isDryRun: options.isDryRun)
                            try await writer.updateRun(next)
                          }
                        }
                        try report.appendFailures(batch.flatMap(\.failures))
                    } catch {
                        failure = error
                        self.writerFailed.withLock { $0 = true }
                        continue
                    }
                    summary = next
                    progress.report(summary)
                }
                progress.finish()
                if let failure { throw failure }
                return summary
            }

            // The producer: pages in, accounts verified in a bounded window, batches out.
            do {
                try await withThrowingTaskGroup(of: AccountResult.self) { accounts in
                    var inFlight = 0
                    var pending: [AccountResult] = []
                    func collect(_ result: AccountResult) async {
                        pending.append(result)
                        if pending.count >= options.batchSize {
                            await pendingBatches.acquire()
                            batches.continuation.yield(pending)
                            pending = []
                        }
                    }
                    // The next page is read while this one is verified, so Apple's requests never
                    // wait for the database; one read at a time on the reader connection.
                    @Sendable func read(after cursor: String) async throws -> ReconciliationStore.AccountPage {
                        try await Self.retryingLostConnections(logger: logger) {
                            try await reader.page(after: cursor, limit: options.pageSize, selection: options.selection, now: now)
                        }
                    }
                    var nextPage: Task<ReconciliationStore.AccountPage, any Error>? = Task { try await read(after: "") }
                    defer { nextPage?.cancel() }
                    pages: while !shouldStop, let reading = nextPage {
                        let page = try await reading.value
                        guard let last = page.accounts.last else { break }
                        nextPage = Task { try await read(after: last) }
                        let (receipts, stored) = (page.receipts, page.stored)
                        for accountId in page.accounts {
                            if shouldStop { break pages }
                            if inFlight >= window, let result = try await accounts.next() {
                                inFlight -= 1
                                await collect(result)
                            }
                            let work = AccountWork(accountId: accountId, receipts: receipts[accountId] ?? [], stored: stored[accountId] ?? [])
                            accounts.addTask { await self.process(work, rules: rules, diff: diff, now: now) }
                            inFlight += 1
                        }
                    }
                    while let result = try await accounts.next() { await collect(result) }
                    if !pending.isEmpty {
                        await pendingBatches.acquire()
                        batches.continuation.yield(pending)
                    }
                }
            } catch {
                batches.continuation.finish()
                throw error
            }
            batches.continuation.finish()
            return try await group.next()!
        }
    }

    /// Verifies an account's receipts and plans its corrections: no database access here.
    func process(_ work: AccountWork, rules: EntitlementRules, diff: EntitlementDiff, now: Date) async -> AccountResult {
        var verified: [VerifiedReceipt] = []
        var updates: [ReceiptUpdate] = []
        var failures: [FailureRecord] = []
        var receiptOutcomes: [ReceiptOutcome] = []
        var counts = AccountOutcomeCounts(outcome: .verified)
        for receipt in work.receipts {
            let local = Self.localDecode(receipt.latestReceipt)
            if local == nil { counts.receiptsNotDecodedLocally += 1 }
            let outcome = await verify(receipt, local: local, accountId: work.accountId, counts: &counts)
            receiptOutcomes.append(outcome.receiptOutcome)
            counts.receipts[outcome.receiptOutcome, default: 0] += 1
            counts.appleRequests += outcome.requests
            if let status = outcome.finalStatus { counts.appleStatuses[String(status), default: 0] += 1 }
            noteSharedSecret(outcome.finalStatus)

            // A status past an integer column's range is an unknown code (a final failure) that
            // `last_status` cannot hold: the row keeps NULL, the report has the number.
            let storableStatus = outcome.finalStatus.flatMap { StorableValues.outOfRange($0, field: "") == nil ? $0 : nil }
            var update = ReceiptUpdate(
                id: receipt.id, rowVersion: receipt.rowVersion, environment: outcome.environment, verifiedAt: nil,
                status: storableStatus, nextAttemptAt: nil, attempts: 0, outcome: outcome.receiptOutcome, latestReceipt: nil)
            if let local, StorableValues.problem(in: local) == nil {
                update.localBundleId = local.bundleId
                update.localOriginalTransactionIds = local.originals
            }
            switch outcome.result {
            case .verified(let response):
                let environment = outcome.environment?.rawValue ?? response.environment ?? "Production"
                verified.append(VerifiedReceipt(receiptId: receipt.id, response: response, environment: environment))
                update.verifiedAt = now
                if let fresh = response.latestReceipt {
                    let current = withoutWhitespace(receipt.latestReceipt)
                    if case .success(let compact) = ReceiptBlob.normalized(fresh, maximumBytes: options.policy.maximumReceiptBytes) {
                        if compact != current {
                            update.latestReceipt = compact
                            counts.latestReceiptsStored += 1
                        }
                    } else {
                        counts.latestReceiptsIgnored += 1
                    }
                }
            case .deferred:
                update.attempts = receipt.attempts + 1
                let backoff = min(options.maximumDeferral, 900 * pow(2, Double(min(receipt.attempts, 10))))
                update.nextAttemptAt = now.addingTimeInterval(backoff)
            case .failed(let status, _):
                update.attempts = receipt.attempts + 1
                // A rejected secret is this job's configuration, not the receipt: try it again next run.
                update.nextAttemptAt = status == 21004 ? nil : now.addingTimeInterval(options.failedRetryAfter)
            case .invalidReceipt, .foreignBundle:
                update.attempts = receipt.attempts + 1
                update.nextAttemptAt = now.addingTimeInterval(options.failedRetryAfter)
            }
            updates.append(update)
            if outcome.receiptOutcome != .verified {
                failures.append(FailureRecord(
                    accountId: work.accountId, receiptId: receipt.id, outcome: outcome.receiptOutcome, appleStatus: outcome.finalStatus,
                    attempts: outcome.attempts, endpoints: outcome.endpoints.map(\.rawValue).joined(separator: ">"),
                    reason: outcome.reason ?? ""))
            }
        }

        let union = EntitlementRules.union(verified)
        var ledger = union.map {
            LedgerEntry(accountId: work.accountId, transaction: $0.transaction, environment: $0.environment)
        }
        counts.outcome = AccountOutcome.combining(receiptOutcomes)
        // Rows the account's last full verification already wrote are not sent again (a backfill
        // rewrites them all). Only a full verification records a digest; anything less clears it.
        let digest = counts.outcome == .verified && !work.receipts.isEmpty ? LedgerEntry.digest(ledger) : nil
        for index in updates.indices { updates[index].ledgerDigest = digest }
        if let digest, options.kind != .backfill, work.receipts.allSatisfy({ $0.ledgerDigest == digest }) {
            ledger = []
        }
        var corrections: [Correction] = []
        // Only accounts all of whose receipts verified get corrections: a partial view could revoke wrongly.
        if counts.outcome == .verified && !work.receipts.isEmpty {
            let computed = rules.entitlements(accountId: work.accountId, receipts: verified, union: union, now: now)
            let plan = diff.corrections(stored: work.stored, computed: computed, now: now,
                                        cancellationReasons: EntitlementRules.cancellationReasons(union))
            corrections = plan.corrections
            counts.corrections = plan.corrections.map(\.kind)
            counts.heldRevokes = plan.heldRevokes.count
            counts.sandboxGrants = plan.corrections.filter { $0.kind == .grant && $0.after.environment == "Sandbox" }.count
        }
        return AccountResult(accountId: work.accountId, counts: counts, receiptUpdates: updates, ledger: ledger,
                             corrections: corrections, failures: failures)
    }

    /// What the local decode of a blob says (it informs the report and the bundle check; it never
    /// grants or revokes), or nil when the blob is no receipt this decoder reads.
    static func localDecode(_ blob: String) -> LocalReceipt? {
        switch try? ReceiptDecoder.decode(Array(blob.utf8)) {
        case .appReceipt(let decoded)?:
            return LocalReceipt(bundleId: decoded.bundleId, originals: decoded.originalTransactionIds)
        case .legacyTransactionReceipt(let legacy)?:
            let original = legacy.purchaseInfo["original-transaction-id"] ?? legacy.purchaseInfo["transaction-id"]
            return LocalReceipt(bundleId: legacy.purchaseInfo["bid"], originals: [original].compactMap { $0 })
        case nil:
            return nil
        }
    }

    /// Asks Apple about one receipt, unless the local decode already shows it cannot count, and
    /// holds the answer to the app's bundle ids and to what PostgreSQL can store.
    private func verify(_ receipt: StoredReceipt, local: LocalReceipt?, accountId: String,
                        counts: inout AccountOutcomeCounts) async -> VerificationOutcome {
        let expected = options.bundleIds.isEmpty ? Set([receipt.bundleId].compactMap { $0 }.filter { !$0.isEmpty }) : options.bundleIds
        func foreign(_ bundle: String, source: String) -> VerificationOutcome.Result? {
            guard !expected.isEmpty, !expected.contains(bundle) else { return nil }
            let shown = StorableValues.problem(text: bundle, field: "") == nil ? bundle : "a bundle id with a NUL byte"
            let reason = "\(source) names the bundle \(shown), not this app's (\(expected.sorted().joined(separator: ", ")))"
            counts.bundleMismatches.append("account \(accountId), receipt \(receipt.id): \(reason)")
            return .foreignBundle(reason: reason)
        }
        var outcome = VerificationOutcome(result: .deferred(reason: "not attempted"), requests: 0, attempts: 0,
                                          endpoints: [], finalStatus: nil, environment: receipt.environment)
        if let bundle = local?.bundleId, let result = foreign(bundle, source: "the receipt") {
            outcome.result = result
            return outcome
        }
        if let local, let problem = StorableValues.problem(in: local) {
            outcome.result = .failed(status: nil, reason: "the receipt's local decode cannot be stored: \(problem)")
            return outcome
        }
        outcome = await client.verify(receipt: receipt.latestReceipt, knownEnvironment: receipt.environment)
        guard case .verified(let response) = outcome.result else { return outcome }
        if let bundle = response.receipt?.bundleId, let result = foreign(bundle, source: "Apple's answer") {
            outcome.result = result
        } else if let problem = StorableValues.problem(in: response) {
            outcome.result = .failed(status: outcome.finalStatus, reason: "Apple's answer cannot be stored: \(problem)")
        }
        return outcome
    }

    private func noteSharedSecret(_ status: Int?) {
        guard let status else { return }
        secretRejections.withLock { state in
            if status == 21004 {
                state.consecutive += 1
                state.total += 1
            } else {
                state.consecutive = 0
            }
        }
    }
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
    var shard: String?
    var excludeOldTransactions: Bool

    init(_ options: RunOptions) {
        kind = options.kind
        dryRun = options.isDryRun
        concurrency = options.concurrency
        requestsPerSecond = options.requestsPerSecond
        maxAttempts = options.policy.maximumAttempts
        sandbox = options.sandboxPolicy.rawValue
        expiryLagSeconds = options.expiryLag
        maxRevokeRatio = options.maximumRevokeRatio
        shard = options.shardText
        excludeOldTransactions = options.policy.excludeOldTransactions
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
