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

/// Verifying and planning: the producer, the writer, and the suspects last.
extension ReconciliationRun {
    // MARK: - Phase 1: verify and plan

    /// Phase 1: verifies the selected accounts and commits, batch by batch, what each one's
    /// answers say (receipt rows, ledger, planned corrections). A producer verifies accounts in a
    /// bounded window while a writer commits batches, at most two waiting, so Apple's requests
    /// keep flowing while the database works.
    func verifyAndPlan(
        _ context: RunContext, rules: EntitlementRules, selection: AccountSelection, summary: RunSummary, report: RunReportWriter
    ) async throws -> RunSummary {
        let (now, reader, logger) = (context.now, context.reader, context.logger)
        let batches = AsyncStream<[AccountResult]>.makeStream()
        let pendingBatches = ConcurrencyLimiter(limit: 2)
        // The total for the progress line, on a terminal and in the log alike: one count a run.
        let total = try? await reader.countAccounts(selection: selection, now: now)
        let progress = ProgressReporter(interval: options.progressInterval, total: total, logger: logger)
        let verifyReceipt = VerifyReceiptSource(client: client, options: options, secretGuard: secretGuard)
        let source: any AppleAccountSource
        if let serverAPI, options.sources.asksServerAPI {
            let signed = ServerAPISource(
                client: serverAPI, verifier: try signedData.get(), options: options,
                secretGuard: secretGuard)
            source = options.sources.crossChecks
                ? BothSources(verifyReceipt: verifyReceipt, serverAPI: signed, authority: options.sources.authority, rules: rules, now: now)
                : signed
        } else {
            source = verifyReceipt
        }
        if context.adoption.isFirstNight {
            logger.notice("run.first_night", metadata: [
                "run.reason": "the app's access was never imported: for an account stored before the first night began, a first row that grants nothing counts as a revoke",
            ])
        }
        let processor = AccountProcessor(source: source, options: options, rules: rules,
                                         diff: EntitlementDiff(expiryLag: options.expiryLag.timeInterval), adoption: context.adoption, now: now)
        let (written, suspects) = try await withThrowingTaskGroup(of: Written.self) { group in
            group.addTask {
                defer { pendingBatches.close() }  // a writer that ended early never leaves the producer waiting
                return try await self.writeBatches(
                    batches.stream, slots: pendingBatches, summary: summary, report: report, progress: progress, context)
            }
            let suspects: [String]
            do {
                suspects = try await verifyAccounts(context, processor: processor, selection: selection) { batch in
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
            suspects, processor: processor, written: written, report: report, progress: progress, context)
        progress.finish()
        return summary
    }

    /// What the writer committed: the run's counts and how many batches.
    typealias Written = (summary: RunSummary, batches: Int)

    /// Last, the suspects: accounts an earlier run died with in flight (docs/guarantees.md, "Hostile input"). Each
    /// is verified alone, its start counted and committed first and its results committed before
    /// the next one starts, so a process that dies now dies on that account only; an account
    /// whose starts never finished three times in a row is set aside instead.
    func verifySuspects(
        _ suspects: [String], processor: AccountProcessor, written: Written, report: RunReportWriter, progress: ProgressReporter,
        _ context: RunContext
    ) async throws -> RunSummary {
        let (now, reader, writer, logger) = (context.now, context.reader, context.writer, context.logger)
        var (summary, sequence) = written
        if !suspects.isEmpty {
            logger.notice("run.suspects", metadata: [
                "run.accounts": .stringConvertible(suspects.count), "run.reason": "an earlier run died with these accounts in flight: each is verified alone",
            ])
        }
        for accountId in suspects where !shouldStop {
            let runId = summary.runId
            let start = try await withDatabaseRetry(logger: logger) {
                try await writer.startAlone(accountId, runId: runId, now: now)
            }
            let work = try await withDatabaseRetry(logger: logger) {
                try await reader.account(accountId, maximumReceiptBytes: options.policy.maximumReceiptBytes)
            }
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
            summary = try await commit([result], sequence: sequence, summary: summary, report: report, context)
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
    func verifyAccounts(
        _ context: RunContext, processor: AccountProcessor, selection: AccountSelection, send: (_ batch: [AccountResult]) async -> Void
    ) async throws -> [String] {
        let (runId, now, reader, logger) = (context.runId, context.now, context.reader, context.logger)
        // C waiting for Apple, and a quarter more decoding, planning or backing off, so a permit
        // never idles for want of an account. Each account in the window holds its receipts and
        // its frame: 2 C held 35 MB more at C = 1,000 for the same throughput (measured at
        // C = 64, 256 and 1,000).
        let window = options.concurrency + max(options.concurrency / 4, 16)
        let options = self.options
        @Sendable func read(after cursor: String?) async throws -> ReconciliationStore.AccountPage? {
            guard let cursor else { return nil }
            return try await withDatabaseRetry(logger: logger) {
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
                for work in current.accounts {
                    if shouldStop { break pages }
                    if inFlight >= window, let result = try await accounts.next() {
                        inFlight -= 1
                        await collect(result)
                    }
                    if let unfinished = work.unfinished {
                        if let reason = unfinished.quarantineReason {
                            await collect(processor.quarantined(work, reason: reason))
                        } else {
                            suspects.append(work.accountId)
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
    func writeBatches(
        _ batches: AsyncStream<[AccountResult]>, slots: ConcurrencyLimiter, summary: RunSummary, report: RunReportWriter,
        progress: ProgressReporter, _ context: RunContext
    ) async throws -> Written {
        var summary = summary
        var failure: (any Error)?
        var sequence = 0
        for await batch in batches {
            defer { slots.release() }
            guard failure == nil else { continue }
            do {
                summary = try await commit(batch, sequence: sequence + 1, summary: summary, report: report, context)
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
    func commit(_ batch: [AccountResult], sequence: Int, summary: RunSummary, report: RunReportWriter, _ context: RunContext)
        async throws -> RunSummary
    {
        let (now, writer, logger) = (context.now, context.writer, context.logger)
        var next = summary
        for result in batch { next.add(result.counts) }
        var write = BatchWrite(run: next, sequence: sequence, startedAt: now, isDryRun: options.isDryRun)
        write.receipts = batch.flatMap(\.receiptUpdates)
        write.ledger = batch.flatMap(\.ledger)
        write.corrections = batch.flatMap(\.corrections)
        write.verifiedAccounts = batch.filter { $0.counts.outcome == .verified }.map(\.accountId)
        write.renewals = RenewalReplacement(accounts: batch.filter { $0.renewals != nil }.map(\.accountId),
                                            entries: batch.flatMap { $0.renewals ?? [] })
        write.finishedAccounts = batch.map(\.accountId)
        try await withDatabaseRetry(logger: logger) { [write] in
            try await ensureLockHeld(logger: logger)
            // A retry after a lost COMMIT acknowledgement finds the batch written already.
            try await writer.commit(write)
        }
        try report.appendFailures(batch.flatMap(\.failures))
        try report.appendDisagreements(batch.flatMap(\.disagreements))
        return next
    }
}
