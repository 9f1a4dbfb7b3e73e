import Foundation
import Postgres
import Reconciliation

extension ReconciliationStore {
    /// Records a new run as `running` and returns its id.
    public func createRun(kind: RunKind, isDryRun: Bool, startedAt: Date, shard: String?, options: some Encodable) async throws -> Int64 {
        let options = try PostgresJSON(encoding: options)
        let rows = try await connection.query("""
            INSERT INTO iap.reconciliation_runs (kind, status, dry_run, started_at, shard, options)
            VALUES (\(kind.rawValue), 'running', \(isDryRun), \(startedAt), \(shard), \(options)) RETURNING id
            """)
        return try rows[0].decode("id")
    }

    /// Takes over the planned corrections that earlier runs left for the accounts this run covers
    /// (the caller holds the run lock, and `RunLock` refuses mixed shard layouts, so no live process
    /// owns them): runs left `running` by a process that died are marked `interrupted`; runs
    /// `interrupted`, `aborted` by the safety limit or `failed` hand over their plan, whatever shard
    /// layout they ran with. A correction taken over keeps the run that planned it
    /// (`planned_by_run_id`), and its account is made due now (`reverify_requested_at`, as a
    /// notification does), so this run verifies it again: only a fresh plan of a re-verified
    /// account is ever applied (docs/guarantees.md, "Interruptions, crashes and safety").
    /// Records the runs taken over (and those they had taken over) in `adopted_from`.
    /// Returns how many corrections moved. `takingAborted` false (the hourly notifications pass):
    /// a plan the safety limit stopped waits for the next night, where someone decides, instead of
    /// being taken up, and likely stopped again, within the hour.
    public func takeOverInterruptedRuns(runId: Int64, shard: Shard?, now: Date, takingAborted: Bool = true) async throws -> Int {
        let (shardIndex, shardCount) = (shard.map(\.index), shard.map(\.count))
        return try await connection.withTransaction { connection in
            // Dead for sure: every run but the live workers of this run's own layout (other shards of K/N).
            try await connection.execute("""
                UPDATE iap.reconciliation_runs
                SET status = 'interrupted', finished_at = COALESCE(finished_at, \(now)),
                    error = COALESCE(error, 'the process ended before the run finished; a later run took over its planned corrections')
                WHERE status = 'running' AND id <> \(runId)
                  AND (\(shardCount)::bigint IS NULL OR shard IS NULL OR shard = \(shard.map { "\($0.index)/\($0.count)" })
                       OR split_part(shard, '/', 2)::bigint <> \(shardCount))
                """)
            let moved = try await connection.query("""
                WITH moved AS (
                    UPDATE iap.corrections c SET run_id = \(runId), planned_by_run_id = COALESCE(c.planned_by_run_id, c.run_id)
                    FROM iap.reconciliation_runs r
                    WHERE c.run_id = r.id AND r.id <> \(runId) AND NOT r.dry_run
                      AND (r.status IN ('interrupted', 'failed') OR (r.status = 'aborted' AND \(takingAborted)))
                      AND c.status = 'planned' AND iap.in_shard(c.account_id, \(shardIndex), \(shardCount))
                    RETURNING r.id AS from_run, c.account_id
                ), due AS (
                    -- An earlier request stands (it is due already); a later one is not this run's to clear.
                    UPDATE iap.app_receipts SET reverify_requested_at = \(now)
                    WHERE account_id IN (SELECT account_id FROM moved) AND reverify_requested_at IS NULL
                )
                SELECT from_run, count(*) AS corrections FROM moved GROUP BY from_run
                """)
            guard !moved.isEmpty else { return 0 }
            let adopted = PostgresArray(try moved.map { try $0.decode("from_run", as: Int64.self) })
            try await connection.execute("""
                UPDATE iap.reconciliation_runs SET adopted_from = (
                    SELECT array_agg(DISTINCT id ORDER BY id) FROM (
                        SELECT unnest(\(adopted)::bigint[]) AS id
                        UNION SELECT unnest(adopted_from) FROM iap.reconciliation_runs WHERE id = ANY(\(adopted)::bigint[])
                    ) runs)
                WHERE id = \(runId)
                """)
            return try moved.reduce(0) { $0 + (try $1.decode("corrections", as: Int.self)) }
        }
    }

    /// Marks superseded every correction this run took over that is still planned: its account was
    /// not verified again in this run (Apple did not answer, or the run did not reach it), so it is
    /// never applied; the account stays due (its `reverify_requested_at`) and the next run plans it
    /// afresh. Returns how many of the run's taken-over corrections are superseded in all (those
    /// replaced by a fresh plan in `writeBatch` too).
    public func retireTakenOverCorrections(runId: Int64) async throws -> Int {
        try await connection.execute("""
            UPDATE iap.corrections SET status = 'superseded'
            WHERE run_id = \(runId) AND status = 'planned' AND planned_by_run_id <> \(runId)
            """)
        return try await connection.query("""
            SELECT count(*) AS superseded FROM iap.corrections
            WHERE run_id = \(runId) AND status = 'superseded' AND planned_by_run_id <> \(runId)
            """)[0].decode("superseded")
    }

    /// Records that the run finished planning, with the accounts it verified and those of them
    /// that would lose an entitlement: what its shard siblings count of it (`siblingShards`).
    public func recordPlanned(runId: Int64, accounts: Int, revokedAccounts: Int, at time: Date) async throws {
        try await connection.execute("""
            UPDATE iap.reconciliation_runs
            SET planned_at = \(time), limit_accounts = \(accounts), limit_revoked_accounts = \(revokedAccounts)
            WHERE id = \(runId)
            """)
    }

    /// The other shards of this run's layout in the same night (docs/guarantees.md, "Safety limit"):
    /// for each other shard index of `K/N`, its latest run that is not a dry run and finished
    /// planning, started after this shard's own previous run finished planning and within the 12
    /// hours before `now` (so never the night before: the previous night's siblings started
    /// before this shard's previous run had planned); their verified accounts and those that would
    /// lose an entitlement, added up.
    public func siblingShards(runId: Int64, shard: Shard, now: Date) async throws -> ShardSiblings {
        let rows = try await connection.query("""
            SELECT count(*) AS shards, coalesce(sum(limit_accounts), 0) AS accounts,
                   coalesce(sum(limit_revoked_accounts), 0) AS revoked
            FROM (
                SELECT DISTINCT ON (split_part(shard, '/', 1)) limit_accounts, limit_revoked_accounts
                FROM iap.reconciliation_runs
                WHERE id <> \(runId) AND NOT dry_run AND planned_at IS NOT NULL AND shard IS NOT NULL
                  AND split_part(shard, '/', 2)::bigint = \(shard.count) AND split_part(shard, '/', 1)::bigint <> \(shard.index)
                  AND started_at > GREATEST(\(now.addingTimeInterval(-12 * 3_600))::timestamptz, COALESCE((
                        SELECT max(planned_at) FROM iap.reconciliation_runs
                        WHERE shard = \("\(shard.index)/\(shard.count)") AND id <> \(runId) AND NOT dry_run), '-infinity'))
                ORDER BY split_part(shard, '/', 1), started_at DESC, id DESC
            ) latest
            """)
        return ShardSiblings(shards: try rows[0].decode("shards"), accounts: try rows[0].decode("accounts"),
                             revokedAccounts: try rows[0].decode("revoked"))
    }

    /// The night a run continues when it took plans over (docs/guarantees.md, "Safety limit"): the
    /// most accounts one of the runs it took over (within 12 hours) had verified; 0 when none.
    /// Re-verifying only a plan's accounts never judges them as a night of their own.
    public func accountsOfTakenOverNight(runId: Int64, now: Date) async throws -> Int {
        try await connection.query("""
            SELECT COALESCE(max(r.accounts_verified), 0)::bigint AS accounts FROM iap.reconciliation_runs r
            WHERE r.id = ANY(SELECT unnest(adopted_from) FROM iap.reconciliation_runs WHERE id = \(runId))
              AND r.started_at > \(now.addingTimeInterval(-12 * 3_600))
            """)[0].decode("accounts")
    }

    /// Counts a batch as committed, in the batch's transaction; false when this batch was
    /// committed already (its COMMIT landed but the acknowledgement was lost), so the retry
    /// writes nothing a second time.
    func claimBatch(runId: Int64, sequence: Int) async throws -> Bool {
        let claimed = try await connection.execute("""
            UPDATE iap.reconciliation_runs SET batches_written = \(sequence)
            WHERE id = \(runId) AND batches_written = \(sequence - 1)
            """)
        if claimed == 1 { return true }
        let written: Int = try await connection.query("""
            SELECT batches_written FROM iap.reconciliation_runs WHERE id = \(runId)
            """)[0].decode("batches_written")
        guard written >= sequence else {
            throw PostgresError(code: .server, message: "run \(runId) has committed \(written) batches, so batch \(sequence) cannot follow")
        }
        return false
    }

    /// Receipts that failed `minimumFailures` runs in a row or more (docs/apple.md, "A receipt that
    /// keeps failing"): how many, and the first `limit`, most runs first, as
    /// `account A (receipt R): N runs in a row, OUTCOME, Apple's last status S: reason`.
    public func failingReceipts(minimumFailures: Int, limit: Int) async throws -> (count: Int, listed: [String]) {
        let rows = try await connection.query("""
            SELECT account_id, id, attempts, last_outcome, last_status, last_failure_reason, count(*) OVER () AS total
            FROM iap.app_receipts
            WHERE attempts > 0 AND attempts >= \(minimumFailures) AND last_outcome IN ('deferred', 'failed', 'invalid_receipt', 'foreign_bundle')
            ORDER BY attempts DESC, account_id, id LIMIT \(limit)
            """)
        let listed = try rows.map { row in
            let status = try row.decode("last_status", as: Int?.self).map { "Apple's last status \($0)" } ?? "no status from Apple"
            return "account \(try row.decode("account_id", as: String.self)) (receipt \(try row.decode("id", as: Int64.self))): "
                + "\(try row.decode("attempts", as: Int.self)) runs in a row, \(try row.decode("last_outcome", as: String.self)), \(status): "
                + (try row.decode("last_failure_reason", as: String?.self) ?? "")
        }
        return (Int(try rows.first?.decode("total", as: Int64.self) ?? 0), listed)
    }

    /// Stores the run's counts (in the batch's transaction, so they match what was committed).
    public func updateRun(_ summary: RunSummary) async throws {
        let statistics = try PostgresJSON(encoding: summary)
        try await connection.execute("""
            UPDATE iap.reconciliation_runs SET
                status = \(summary.status.rawValue), finished_at = \(summary.finishedAt),
                accounts_processed = \(summary.accountsProcessed), accounts_verified = \(summary.accountsVerified),
                accounts_unchanged = \(summary.accountsUnchanged), accounts_corrected = \(summary.accountsCorrected),
                accounts_deferred = \(summary.accountsDeferred), accounts_failed = \(summary.accountsFailed),
                accounts_invalid_receipt = \(summary.accountsInvalidReceipt),
                receipts_processed = \(summary.receipts.values.reduce(0, +)), corrections = \(summary.totalCorrections),
                apple_requests = \(summary.appleRequests), accounts_revoked = \(summary.accountsRevoked),
                held_revokes = \(summary.heldRevokes), statistics = \(statistics), error = \(summary.error)
            WHERE id = \(summary.runId)
            """)
    }

    /// Planned corrections of the run: accounts in all, and accounts that would lose an
    /// entitlement (after `retireTakenOverCorrections`, the run's own plan only).
    public func plannedRevokes(runId: Int64) async throws -> (accounts: Int, revokedAccounts: Int, corrections: Int) {
        let rows = try await connection.query("""
            SELECT count(DISTINCT account_id) AS accounts,
                   count(DISTINCT account_id) FILTER (WHERE kind = 'revoke') AS revoked,
                   count(*) AS corrections
            FROM iap.corrections WHERE run_id = \(runId) AND status = 'planned'
            """)
        return (try rows[0].decode("accounts"), try rows[0].decode("revoked"), try rows[0].decode("corrections"))
    }

    /// The run's corrections, for reports, streamed in id order.
    public func forEachCorrection(runId: Int64, _ body: (CorrectionRow) throws -> Void) async throws {
        try await connection.withCursor("""
            SELECT id, account_id, product_id, kind, reason, status, applied_at,
                   before->>'state' AS before_state, after->>'state' AS after_state,
                   (before->>'expires_at')::timestamptz AS before_expires_at, (after->>'expires_at')::timestamptz AS after_expires_at,
                   after->>'environment' AS environment
            FROM iap.corrections WHERE run_id = \(runId) ORDER BY id
            """, fetchSize: 5_000) { cursor in
            for try await rows in cursor {
                for row in rows {
                    try body(CorrectionRow(
                        id: try row.decode("id"), accountId: try row.decode("account_id"), productId: try row.decode("product_id"),
                        kind: try row.decodeRawValue("kind"), reason: try row.decode("reason"), status: try row.decodeRawValue("status"),
                        appliedAt: try row.decode("applied_at"), beforeState: try row.decode("before_state"),
                        afterState: try row.decode("after_state"), beforeExpiresAt: try row.decode("before_expires_at"),
                        afterExpiresAt: try row.decode("after_expires_at"), environment: try row.decode("environment")))
                }
            }
        }
    }
}

extension ReconciliationStore {
    /// Where the app's adoption of the job stands (docs/adoption.md, "The first night"): whether
    /// its access was imported, and when the first night began. A plain read (`explain` changes nothing).
    public func adoption() async throws -> Adoption {
        guard let row = try await connection.query("SELECT access_imported_at, first_night_started_at FROM iap.adoption").first else {
            return Adoption(accessImportedAt: nil, firstNightStartedAt: nil)
        }
        return Adoption(accessImportedAt: try row.decode("access_imported_at"), firstNightStartedAt: try row.decode("first_night_started_at"))
    }

    /// Records now, on the database's clock, as the first night's beginning if none is recorded
    /// (the first run that is not a dry run), and returns where the adoption then stands.
    public func beginFirstNight() async throws -> Adoption {
        let row = try await connection.query("""
            INSERT INTO iap.adoption (first_night_started_at) VALUES (now())
            ON CONFLICT (id) DO UPDATE SET first_night_started_at = COALESCE(iap.adoption.first_night_started_at, now())
            RETURNING access_imported_at, first_night_started_at
            """)[0]
        return Adoption(accessImportedAt: try row.decode("access_imported_at"), firstNightStartedAt: try row.decode("first_night_started_at"))
    }

    /// When the account's first receipt was stored (nil: none is).
    public func firstStored(accountId: String) async throws -> Date? {
        try await connection.query("SELECT min(created_at) AS stored FROM iap.app_receipts WHERE account_id = \(accountId)")[0].decode("stored")
    }

    /// Whether receipts are stored to decide access from while `iap.entitlements` holds no row at
    /// all: nothing of the app's own access was imported (with no receipt, nothing can be taken away).
    public func hasReceiptsButNoEntitlements() async throws -> Bool {
        try await connection.query("""
            SELECT NOT EXISTS (SELECT 1 FROM iap.entitlements) AND EXISTS (SELECT 1 FROM iap.app_receipts) AS never_imported
            """)[0].decode("never_imported")
    }

    /// The accounts this run's plan takes access from, per product: what a first night prints
    /// before applying anything (docs/adoption.md, "The first night").
    public func plannedLosses(runId: Int64) async throws -> [(productId: String, accounts: Int)] {
        try await connection.query("""
            SELECT product_id, count(DISTINCT account_id) AS accounts
            FROM iap.corrections WHERE run_id = \(runId) AND status = 'planned' AND kind = 'revoke'
            GROUP BY product_id ORDER BY product_id
            """).map { (try $0.decode("product_id"), try $0.decode("accounts")) }
    }

    /// The summary a run stored, or nil when there is no such run. A summary an older build wrote
    /// after migration 0033 (a night still running on the old image while a new one migrated)
    /// says `correctionsAdopted`: read as `correctionsTakenOver`.
    public func runSummary(runId: Int64) async throws -> RunSummary? {
        let rows = try await connection.query("""
            SELECT CASE WHEN statistics ? 'correctionsAdopted'
                        THEN (statistics - 'correctionsAdopted')
                             || jsonb_build_object('correctionsTakenOver', statistics -> 'correctionsAdopted')
                        ELSE statistics END AS statistics,
                   status, finished_at, error
            FROM iap.reconciliation_runs WHERE id = \(runId)
            """)
        guard let row = rows.first else { return nil }
        var summary = try row.decode("statistics", as: PostgresJSON.self).decoded(as: RunSummary.self)
        // The row's status is the last word (a later run may have marked this one interrupted).
        summary.runId = runId
        let status: String = try row.decode("status")
        guard let known = RunStatus(rawValue: status) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown run status", column: "status")
        }
        summary.status = known
        summary.finishedAt = try row.decode("finished_at")
        summary.error = try row.decode("error")
        return summary
    }
}

/// What the other shards of a layout verified and planned in the same night (`siblingShards`).
public struct ShardSiblings: Sendable, Equatable {
    /// Shard indexes counted (at most N - 1).
    public var shards: Int
    public var accounts: Int
    public var revokedAccounts: Int
}
