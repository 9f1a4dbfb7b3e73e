import Foundation
import Postgres
import Reconciliation

extension ReconciliationStore {
    /// Records a new run as `running` and returns its id.
    public func createRun(kind: String, isDryRun: Bool, startedAt: Date, shard: String?, options: PostgresJSON) async throws -> Int64 {
        let rows = try await connection.query("""
            INSERT INTO iap.reconciliation_runs (kind, status, dry_run, started_at, shard, options)
            VALUES (\(kind), 'running', \(isDryRun), \(startedAt), \(shard), \(options)) RETURNING id
            """)
        return try rows[0].decode("id")
    }

    /// Takes over the planned corrections of earlier runs of the same shard (the caller holds the
    /// lock, so no live process owns them): runs left `running` by a process that died are marked
    /// `interrupted`, so the work they committed is applied rather than redone; runs `aborted` by
    /// the safety limit hand over their plan, which this run applies only if it passes the limit
    /// (after an operator raised it, say). A re-verified account's fresh plan supersedes the old one.
    /// Returns how many corrections moved and how many accounts those runs had processed.
    public func adoptInterruptedRuns(runId: Int64, shard: String?, now: Date) async throws -> (corrections: Int, accounts: Int) {
        try await connection.withTransaction { connection in
            try await connection.execute("""
                UPDATE iap.reconciliation_runs
                SET status = 'interrupted', finished_at = COALESCE(finished_at, \(now)),
                    error = COALESCE(error, 'the process ended before the run finished; a later run took over its planned corrections')
                WHERE status = 'running' AND id <> \(runId) AND shard IS NOT DISTINCT FROM \(shard)
                """)
            let candidates = try await connection.query("""
                SELECT r.id, r.accounts_processed FROM iap.reconciliation_runs r
                WHERE r.id <> \(runId) AND NOT r.dry_run AND r.status IN ('interrupted', 'aborted')
                  AND r.shard IS NOT DISTINCT FROM \(shard)
                  AND EXISTS (SELECT 1 FROM iap.corrections c WHERE c.run_id = r.id AND c.status = 'planned')
                """)
            guard !candidates.isEmpty else { return (0, 0) }
            let adopted: [Int64] = try candidates.map { try $0.decode("id") }
            let accounts = try candidates.reduce(0) { $0 + (try $1.decode("accounts_processed", as: Int.self)) }
            let ids = PostgresTextArray(adopted.map(String.init))
            let moved = try await connection.execute("""
                UPDATE iap.corrections SET run_id = \(runId) WHERE run_id = ANY(\(ids)::bigint[]) AND status = 'planned'
                """)
            try await connection.execute("UPDATE iap.reconciliation_runs SET adopted_from = \(ids)::bigint[] WHERE id = \(runId)")
            return (moved, accounts)
        }
    }

    /// Stores the run's counts (in the batch's transaction, so they match what was committed).
    public func updateRun(_ summary: RunSummary) async throws {
        let statistics = try PostgresJSON(encoding: summary)
        try await connection.execute("""
            UPDATE iap.reconciliation_runs SET
                status = \(summary.status), finished_at = \(summary.finishedAt),
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

    /// Planned corrections of the run (its own and adopted ones): accounts in all, and accounts
    /// that would lose an entitlement.
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
    public func forEachCorrection(runId: Int64, _ body: (CorrectionRecord) throws -> Void) async throws {
        try await connection.withCursor("""
            SELECT id, account_id, product_id, kind, reason, status, applied_at,
                   before->>'state' AS before_state, after->>'state' AS after_state,
                   before->>'expires_at' AS before_expires_at, after->>'expires_at' AS after_expires_at,
                   after->>'environment' AS environment
            FROM iap.corrections WHERE run_id = \(runId) ORDER BY id
            """, fetchSize: 5_000) { cursor in
            for try await rows in cursor {
                for row in rows {
                    try body(CorrectionRecord(
                        id: try row.decode("id"), accountId: try row.decode("account_id"), productId: try row.decode("product_id"),
                        kind: try row.decode("kind"), reason: try row.decode("reason"), status: try row.decode("status"),
                        appliedAt: try row.decode("applied_at"), beforeState: try row.decode("before_state"),
                        afterState: try row.decode("after_state"), beforeExpiresAt: try row.decode("before_expires_at"),
                        afterExpiresAt: try row.decode("after_expires_at"), environment: try row.decode("environment")))
                }
            }
        }
    }
}

/// One correction as reports list it.
public struct CorrectionRecord: Sendable {
    public var id: Int64
    public var accountId: String
    public var productId: String
    public var kind: String
    public var reason: String
    public var status: String
    public var appliedAt: Date?
    public var beforeState: String?
    public var afterState: String?
    public var beforeExpiresAt: String?
    public var afterExpiresAt: String?
    public var environment: String?
}

extension ReconciliationStore {
    /// The summary a run stored, or nil when there is no such run.
    public func runSummary(runId: Int64) async throws -> RunSummary? {
        let rows = try await connection.query("""
            SELECT statistics, status, finished_at, error FROM iap.reconciliation_runs WHERE id = \(runId)
            """)
        guard let row = rows.first else { return nil }
        var summary = try row.decode("statistics", as: PostgresJSON.self).decoded(as: RunSummary.self)
        // The row's status is the last word (a later run may have marked this one interrupted).
        summary.runId = runId
        summary.status = try row.decode("status")
        summary.finishedAt = try row.decode("finished_at")
        summary.error = try row.decode("error")
        return summary
    }
}
