import AppStore
import AppStoreModels
import Foundation
import Throttling
import Logging
import Postgres
import Reconciliation
import SignedData
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

    public init(options: RunOptions, connections: Connections, client: VerifyReceiptClient, serverAPI: ServerAPIClient? = nil,
                sharedSecret: String, logger: Logger, sharedSecretRejectionLimit: Int = 20,
                planned: (@Sendable (SchedulePlan) -> Void)? = nil) {
        self.planned = planned
        self.serverAPI = serverAPI
        signedData = Result { () throws(SignedDataVerifier.BadRoot) in try SignedDataVerifier(configuration: options.signedDataConfiguration) }
        self.options = options
        self.sharedSecret = sharedSecret
        self.connections = connections
        self.client = client
        self.logger = logger
        secretGuard = SharedSecretGuard(limit: sharedSecretRejectionLimit, appleStop: client.appleStop)
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
        guard try await RunLock.tryAcquire(connections.lock, shard: options.selection.shard) else { throw RunLocked() }
        do {
            let result = try await withTaskCancellationHandler {
                try await runHoldingLock()
            } onCancel: {
                requestStop()
            }
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
            logger.warning("run.lock_retaken", metadata: ["run.reason": "the connection holding the run lock was lost"])
        }
    }

    /// The phases in order: the run's row, what comes before verifying (adoption, notifications,
    /// the report files), verifying and planning, applying, the ending written everywhere.
    private func runHoldingLock() async throws -> (summary: RunSummary, ending: Ending) {
        let now = Date()
        let reader = ReconciliationStore(connection: connections.reader)
        let writer = ReconciliationStore(connection: connections.writer)
        var summary = try await startRun(now: now, writer: writer)
        var logger = self.logger
        logger[metadataKey: "run.id"] = "\(summary.runId)"
        logger.info("run.started", metadata: [
            "run.kind": "\(options.kind.rawValue)", "run.dry_run": "\(options.isDryRun)", "run.shard": "\(options.shardText ?? "all")",
        ])

        let report: RunReportWriter
        do {
            report = try await prepare(now: now, writer: writer, summary: &summary, logger: logger)
        } catch {
            try await recordFailure(error, summary: &summary, writer: writer, report: nil)
        }

        let ending: Ending
        do {
            let rules = EntitlementRules(catalog: try await reader.catalog(), sandboxPolicy: options.sandboxPolicy)
            let selection = try await plannedSelection(now: now, writer: writer, summary: &summary, logger: logger)
            summary = try await verifyAndPlan(now: now, rules: rules, reader: reader, writer: writer, selection: selection,
                                              summary: summary, report: report, logger: logger)
            ending = try await applyWithinSafetyLimit(now: now, writer: writer, summary: &summary, logger: logger)
        } catch {
            try await recordFailure(error, summary: &summary, writer: writer, report: report)
        }

        try await finish(ending, summary: &summary, writer: writer, report: report, logger: logger)
        return (summary, ending)
    }

    /// The run's row in `iap.reconciliation_runs`, with its options; the summary starts from it.
    private func startRun(now: Date, writer: ReconciliationStore) async throws -> RunSummary {
        var summary = RunSummary()
        summary.kind = options.kind
        summary.isDryRun = options.isDryRun
        summary.startedAt = now
        summary.shard = options.shardText
        summary.runId = try await writer.createRun(
            kind: options.kind, isDryRun: options.isDryRun, startedAt: now, shard: options.shardText,
            options: try PostgresJSON(encoding: OptionsRecord(options)))
        return summary
    }

    /// Before verifying: takes over the planned corrections of runs that died, processes the
    /// stored notifications, and opens the report files (without a report the run does not start).
    private func prepare(now: Date, writer: ReconciliationStore, summary: inout RunSummary, logger: Logger) async throws -> RunReportWriter {
        if !options.isDryRun {
            summary.correctionsAdopted = try await writer.adoptInterruptedRuns(runId: summary.runId, shard: options.selection.shard, now: now)
            if summary.correctionsAdopted > 0 {
                logger.notice("run.adopted", metadata: ["run.corrections": "\(summary.correctionsAdopted)"])
            }
        }
        if !options.isDryRun && options.retriesQuarantined {
            let released = try await writer.releaseQuarantinedAccounts(now: now)
            logger.notice("account.quarantine_released", metadata: ["account.count": "\(released)"])
        }
        if !options.isDryRun && options.processesNotifications {
            try await ensureLockHeld(logger: logger)
            if options.retriesQuarantined {
                let released = try await NotificationStore(connection: connections.writer).releaseQuarantined()
                logger.notice("notification.quarantine_released", metadata: ["notification.count": "\(released)"])
            }
            try await readNotificationHistory(now: now, summary: &summary, logger: logger)
            let processor = NotificationProcessor(
                store: NotificationStore(connection: connections.writer), ledger: writer, sharedSecret: sharedSecret,
                verifier: try signedData.get(), maximumAge: options.notificationMaximumAge, logger: logger)
            try await processor.process(runId: summary.runId, now: now, summary: &summary)
            try await writer.updateRun(summary)
        }
        let report = try RunReportWriter(
            directory: options.reportDirectory ?? URL(filePath: "reports").appending(path: "run-\(summary.runId)"),
            crossCheck: options.crossCheck)
        try report.appendQuarantined(summary.notificationsQuarantined ?? [])
        return report
    }

    /// Get Notification History into `iap.notifications`, before they are processed: one worker
    /// reads it (shard 0, or the only one), for each environment, within the API's budget.
    private func readNotificationHistory(now: Date, summary: inout RunSummary, logger: Logger) async throws {
        guard options.readsNotificationHistory, let serverAPI, (options.selection.shard?.index ?? 0) == 0 else { return }
        let feed = NotificationHistoryFeed(
            client: serverAPI, store: NotificationStore(connection: connections.writer),
            firstSince: options.notificationHistorySince ?? now.addingTimeInterval(-30 * 86_400), secretGuard: secretGuard, logger: logger)
        var reads: [NotificationHistoryRead] = []
        for environment in [AppleEnvironment.production, .sandbox] {
            reads.append(try await feed.pull(environment, now: now))
            summary.appleRequests += reads.last!.requests
        }
        summary.notificationHistory = reads
    }

    /// The accounts this run takes: those selected, or, for a rolling run, its plan written to
    /// `iap.run_schedule` (notified, at risk, then the full cycle, as many as the window holds at
    /// the API budget), said in the log and to `planned` before any account is verified.
    private func plannedSelection(now: Date, writer: ReconciliationStore, summary: inout RunSummary, logger: Logger) async throws
        -> AccountSelection
    {
        guard let rolling = options.rollingSchedule, case .due(let staleAfter) = options.selection.kind else { return options.selection }
        let budget = serverAPI?.budget ?? options.apiBudget()
        let budgets = ["history": budget.budget(.init(.history, .production)), "statuses": budget.budget(.init(.statuses, .production))]
        let perAccount = try await Self.retryingLostConnections(logger: logger) { try await writer.measuredRequestsPerAccount() }
            ?? SchedulePlan.firstGuess
        let capacity = rolling.window.map {
            SchedulePlan.capacity(windowSeconds: $0.timeInterval, budgetPerSecond: budgets, requestsPerAccount: perAccount)
        }
        let (due, scheduled) = try await Self.retryingLostConnections(logger: logger) {
            try await writer.planSchedule(
                runId: summary.runId, shard: options.selection.shard, now: now, staleAfter: staleAfter, fullCycle: rolling.fullCycle,
                atRiskUntil: now.adding(options.expiryLag).addingTimeInterval(86_400), capacity: capacity)
        }
        let plan = SchedulePlan(
            due: due, scheduled: scheduled, windowSeconds: rolling.window?.timeInterval, capacity: capacity, requestsPerAccount: perAccount,
            budgetPerSecond: budgets, fullCycleSeconds: rolling.fullCycle.timeInterval, plannedAt: now)
        summary.schedule = plan
        logger.info("run.planned", metadata: [
            "run.scheduled": "\(plan.totalScheduled)", "run.due": "\(plan.totalDue)", "run.left": "\(plan.leftForNextNight)",
            "run.estimated_seconds": "\(Int(plan.estimatedSeconds))",
        ])
        planned?(plan)
        return AccountSelection(kind: .scheduled(runId: summary.runId))
    }

    /// Writes how the run ended to its row, its report files, the metrics file and the log. Work
    /// already committed stays committed when the report cannot be written; the error says so.
    private func finish(_ ending: Ending, summary: inout RunSummary, writer: ReconciliationStore, report: RunReportWriter,
                        logger: Logger) async throws {
        summary.appleStormPauses = client.stormGate.pauses
        // The process did not die: no start this run counted and left was a death.
        let runId = summary.runId
        try await Self.retryingLostConnections(logger: logger) { try await writer.takeBackStarts(runId: runId) }
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
                (key.description, APIEndpointUsage(budgetPerSecond: used.budget, requests: used.requests, throttled: used.throttled, seconds: seconds))
            })
        }
        let finished = summary
        try await Self.retryingLostConnections(logger: logger) { try await writer.updateRun(finished) }
        do {
            try await report.finish(summary: summary, store: writer)
        } catch {
            let missing = ReportNotWritten(runId: summary.runId, status: summary.status, cause: "\(error)")
            summary.error = [summary.error, missing.description].compactMap { $0 }.joined(separator: "; ")
            let recorded = summary
            try? await writer.updateRun(recorded)
            try? writeMetrics(summary)
            throw missing
        }
        try writeMetrics(summary)
        logger.info("run.finished", metadata: [
            "run.status": "\(summary.status.rawValue)", "run.accounts": "\(summary.accountsProcessed)",
            "run.corrections": "\(summary.totalCorrections)", "run.applied": "\(summary.correctionsApplied)",
            "apple.requests": "\(summary.appleRequests)",
        ])
    }

    /// Records the run as `failed` (its committed plan is taken over by the next run), writes what
    /// report it can, and rethrows.
    private func recordFailure(_ error: any Error, summary: inout RunSummary, writer: ReconciliationStore,
                               report: RunReportWriter?) async throws -> Never {
        summary.status = .failed
        summary.error = "\(error)"
        summary.finishedAt = Date()
        try? await writer.takeBackStarts(runId: summary.runId)
        try? await writer.updateRun(summary)
        try? await report?.finish(summary: summary, store: writer)
        try? writeMetrics(summary)
        throw error
    }

    /// Checks the safety limit over every account the run counts (each once), then applies the
    /// planned corrections batch by batch, or applies nothing and ends `aborted`.
    private func applyWithinSafetyLimit(now: Date, writer: ReconciliationStore, summary: inout RunSummary,
                                        logger: Logger) async throws -> Ending {
        if secretGuard.hasRejected(accountsVerified: summary.accountsVerified) { return .sharedSecretRejected }
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
            logger.error("run.aborted", metadata: ["run.reason": "\(summary.error!)"])
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
                logger.warning("database.retrying", metadata: ["database.attempt": "\(attempt)", "error": "\(error)"])
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

    /// Phase 1: verifies the selected accounts and commits, batch by batch, what each one's
    /// answers say (receipt rows, ledger, planned corrections). A producer verifies accounts in a
    /// bounded window while a writer commits batches, at most two waiting, so Apple's requests
    /// keep flowing while the database works.
    private func verifyAndPlan(
        now: Date, rules: EntitlementRules, reader: ReconciliationStore, writer: ReconciliationStore, selection: AccountSelection,
        summary: RunSummary, report: RunReportWriter, logger: Logger
    ) async throws -> RunSummary {
        let batches = AsyncStream<[AccountResult]>.makeStream()
        let pendingBatches = ConcurrencyLimiter(limit: 2)
        // The total is only worth a query for a person watching a terminal.
        let total = ProgressReporter.isTerminal ? try? await reader.countAccounts(selection: selection, now: now) : nil
        let progress = ProgressReporter(interval: options.progressInterval, total: total, logger: logger)
        let verifyReceipt = VerifyReceiptSource(client: client, options: options, secretGuard: secretGuard)
        let source: any AppleAccountSource
        if let serverAPI, options.source == .serverAPI || options.crossCheck {
            let signed = ServerAPISource(
                client: serverAPI, verifier: try signedData.get(), options: options,
                secretGuard: secretGuard)
            source = options.crossCheck
                ? BothSources(verifyReceipt: verifyReceipt, serverAPI: signed, authority: options.source, rules: rules, now: now)
                : signed
        } else {
            source = verifyReceipt
        }
        let processor = AccountProcessor(source: source, options: options, rules: rules,
                                         diff: EntitlementDiff(expiryLag: options.expiryLag.timeInterval), now: now)
        let (written, suspects) = try await withThrowingTaskGroup(of: Written.self) { group in
            group.addTask {
                defer { pendingBatches.close() }  // a writer that ended early never leaves the producer waiting
                return try await self.writeBatches(batches.stream, slots: pendingBatches, summary: summary, now: now,
                                                   writer: writer, report: report, progress: progress, logger: logger)
            }
            let suspects: [String]
            do {
                suspects = try await verifyAccounts(
                    processor: processor, reader: reader, selection: selection, runId: summary.runId, now: now, logger: logger
                ) { batch in
                    await pendingBatches.acquire()
                    batches.continuation.yield(batch)
                }
            } catch {
                batches.continuation.finish()
                throw error
            }
            batches.continuation.finish()
            return (try await group.next()!, suspects)
        }
        let summary = try await verifySuspects(
            suspects, processor: processor, reader: reader, writer: writer, written: written, now: now, report: report,
            progress: progress, logger: logger)
        progress.finish()
        return summary
    }

    /// What the writer committed: the run's counts and how many batches.
    typealias Written = (summary: RunSummary, batches: Int)

    /// Last, the suspects: accounts an earlier run died with in flight (contract section 11). Each
    /// is verified alone, its start counted and committed first and its results committed before
    /// the next one starts, so a process that dies now dies on that account only; an account
    /// whose starts never finished three times in a row is set aside instead.
    private func verifySuspects(
        _ suspects: [String], processor: AccountProcessor, reader: ReconciliationStore, writer: ReconciliationStore,
        written: Written, now: Date, report: RunReportWriter, progress: ProgressReporter, logger: Logger
    ) async throws -> RunSummary {
        var (summary, sequence) = written
        if !suspects.isEmpty {
            logger.notice("run.suspects", metadata: [
                "run.accounts": "\(suspects.count)", "run.reason": "an earlier run died with these accounts in flight: each is verified alone",
            ])
        }
        for accountId in suspects where !shouldStop {
            let runId = summary.runId
            let start = try await Self.retryingLostConnections(logger: logger) {
                try await writer.startAlone(accountId, runId: runId, now: now)
            }
            let stored = try await Self.retryingLostConnections(logger: logger) {
                try await reader.account(accountId, maximumReceiptBytes: options.policy.maximumReceiptBytes)
            }
            let work = AccountWork(accountId: accountId, receipts: stored.receipts, stored: stored.entitlements)
            let result: AccountResult?
            switch start {
            case .process:
                result = await processor.process(work)
            case .quarantined(let reason):
                logger.error("account.quarantined", metadata: ["account.id": "\(accountId)", "account.reason": "\(reason)"])
                result = processor.quarantined(work, reason: reason)
            }
            guard let result else { break }  // cancelled: nothing written, the account stays a suspect
            sequence += 1
            summary = try await commit([result], sequence: sequence, summary: summary, now: now, writer: writer, report: report, logger: logger)
            progress.report(summary)
        }
        return summary
    }

    /// The producer: pages of due accounts in, each account verified in a window of
    /// `1.25 x --concurrency`, results out in batches of `--batch-size`. The next page is read while
    /// this one is verified (one read at a time on the reader connection), so Apple's requests
    /// never wait for the database.
    ///
    /// Each page's accounts are marked as started before any of them is worked on. Accounts an
    /// earlier run left unfinished are not verified here: they are returned, to be verified alone
    /// last (`verifySuspects`); quarantined ones fail unread.
    private func verifyAccounts(
        processor: AccountProcessor, reader: ReconciliationStore, selection: AccountSelection, runId: Int64, now: Date, logger: Logger,
        send: (_ batch: [AccountResult]) async -> Void
    ) async throws -> [String] {
        // C waiting for Apple, and a quarter more decoding, planning or backing off, so a permit
        // never idles for want of an account. Each account in the window holds its receipts and
        // its frame: 2 C held 35 MB more at C = 1,000 for the same throughput (measured at
        // C = 64, 256 and 1,000).
        let window = options.concurrency + max(options.concurrency / 4, 16)
        let options = self.options
        @Sendable func read(after cursor: String?) async throws -> ReconciliationStore.AccountPage? {
            guard let cursor else { return nil }
            return try await Self.retryingLostConnections(logger: logger) {
                try await reader.page(
                    after: cursor, limit: options.pageSize, selection: selection, now: now,
                    maximumReceiptBytes: options.policy.maximumReceiptBytes, markingFor: runId)
            }
        }
        return try await withThrowingTaskGroup(of: AccountResult?.self) { accounts in
            var suspects: [String] = []
            var inFlight = 0
            var pending: [AccountResult] = []
            func collect(_ result: AccountResult?) async {
                guard let result else { return }
                pending.append(result)
                guard pending.count >= options.batchSize else { return }
                await send(pending)
                pending = []
            }
            var page = try await read(after: "")
            pages: while let current = page, !current.accounts.isEmpty, !shouldStop {
                async let next = read(after: current.cursor)
                for accountId in current.accounts {
                    if shouldStop { break pages }
                    if inFlight >= window, let result = try await accounts.next() {
                        inFlight -= 1
                        await collect(result)
                    }
                    let work = AccountWork(accountId: accountId, receipts: current.receipts[accountId] ?? [],
                                           stored: current.stored[accountId] ?? [])
                    if let unfinished = current.unfinished[accountId] {
                        if let reason = unfinished.quarantineReason {
                            await collect(processor.quarantined(work, reason: reason))
                        } else {
                            suspects.append(accountId)
                        }
                        continue
                    }
                    accounts.addTask { await processor.process(work) }
                    inFlight += 1
                }
                page = try await next
            }
            while let result = try await accounts.next() { await collect(result) }
            if !pending.isEmpty { await send(pending) }
            return suspects
        }
    }

    /// The writer: one transaction per batch (receipt rows, ledger, planned corrections and the
    /// run's counts together), then the batch's failure lines. After a failure it keeps draining,
    /// so the producer is never left waiting, and stops the producer.
    private func writeBatches(
        _ batches: AsyncStream<[AccountResult]>, slots: ConcurrencyLimiter, summary: RunSummary, now: Date,
        writer: ReconciliationStore, report: RunReportWriter, progress: ProgressReporter, logger: Logger
    ) async throws -> Written {
        var summary = summary
        var failure: (any Error)?
        var sequence = 0
        for await batch in batches {
            defer { slots.release() }
            guard failure == nil else { continue }
            do {
                summary = try await commit(batch, sequence: sequence + 1, summary: summary, now: now, writer: writer, report: report, logger: logger)
            } catch {
                failure = error
                writerFailed.withLock { $0 = true }
                continue
            }
            sequence += 1
            progress.report(summary)
        }
        if let failure { throw failure }
        return (summary, sequence)
    }

    /// Commits one batch in one transaction (receipt rows, ledger, planned corrections, the marks
    /// of its accounts cleared, and the run's counts), then appends its failure lines to the
    /// report. Returns the run's counts with the batch's.
    private func commit(_ batch: [AccountResult], sequence: Int, summary: RunSummary, now: Date, writer: ReconciliationStore,
                        report: RunReportWriter, logger: Logger) async throws -> RunSummary {
        var next = summary
        for result in batch { next.add(result.counts) }
        try await Self.retryingLostConnections(logger: logger) { [next] in
            try await ensureLockHeld(logger: logger)
            try await writer.connection.withTransaction { _ in
                // A retry after a lost COMMIT acknowledgement finds the batch written already.
                guard try await writer.claimBatch(runId: next.runId, sequence: sequence) else { return }
                try await writer.writeBatch(
                    runId: next.runId, startedAt: now, receipts: batch.flatMap(\.receiptUpdates),
                    ledger: batch.flatMap(\.ledger), corrections: batch.flatMap(\.corrections),
                    verifiedAccounts: batch.filter { $0.counts.outcome == .verified }.map(\.accountId),
                    renewals: RenewalReplacement(
                        accounts: batch.filter { $0.renewals != nil }.map(\.accountId),
                        entries: batch.flatMap { $0.renewals ?? [] }),
                    finishedAccounts: batch.map(\.accountId), isDryRun: options.isDryRun)
                try await writer.updateRun(next)
            }
        }
        try report.appendFailures(batch.flatMap(\.failures))
        try report.appendDisagreements(batch.flatMap(\.disagreements))
        return next
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
        expiryLagSeconds = options.expiryLag.timeInterval
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
