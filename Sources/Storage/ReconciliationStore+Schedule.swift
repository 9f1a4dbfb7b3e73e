import AppStoreModels
import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// The SQL of a rolling run's plan: which accounts are due and why, in the order they are taken.
extension ReconciliationStore {
    /// Due accounts by reason, and the first `capacity` of them (all when nil) written as the run's
    /// plan (`iap.run_schedule`): those a notification made due, then those at risk (verified
    /// before `staleAfter` ago, with an entitlement in grace or billing retry, expiring before
    /// `atRiskUntil`, or still granted over a refund in the ledger), then those not verified within
    /// `fullCycle`, oldest verification first. Deferred receipts wait for their `next_attempt_at`.
    public func planSchedule(
        runId: Int64, shard: Shard?, now: Date, staleAfter: Duration, fullCycle: Duration, atRiskUntil: Date,
        capacity: Int?
    ) async throws -> (due: [ScheduleReason: Int], scheduled: [ScheduleReason: Int]) {
        let staleBefore = now.adding(.zero - staleAfter)
        let cycleBefore = now.adding(.zero - fullCycle)
        // The plans of ended runs, and this run's own (a retry after a lost COMMIT acknowledgement
        // plans afresh), in a statement of their own, skipping rows another shard is deleting at
        // the same moment: shards that plan at once wait for none of each other, and every ended
        // plan (a dry run's, an old shard layout's) is pruned by whichever run comes next.
        try await connection.execute("""
            DELETE FROM iap.run_schedule
            WHERE (run_id, position) IN (
                SELECT s.run_id, s.position FROM iap.run_schedule s JOIN iap.reconciliation_runs r ON r.id = s.run_id
                WHERE r.id = \(runId) OR r.status <> 'running'
                FOR UPDATE OF s SKIP LOCKED)
            """)
        return try await connection.withTransaction { connection in
            let rows = try await connection.query("""
                WITH receipts AS (
                    SELECT account_id,
                           bool_or(reverify_requested_at IS NOT NULL) AS notified,
                           bool_or((last_verified_at IS NULL OR last_verified_at < \(staleBefore))
                                   AND (next_attempt_at IS NULL OR next_attempt_at <= \(now))) AS stale,
                           bool_or((last_verified_at IS NULL OR last_verified_at < \(cycleBefore))
                                   AND (next_attempt_at IS NULL OR next_attempt_at <= \(now))) AS cycle,
                           min(last_verified_at) AS oldest
                    FROM iap.app_receipts
                    WHERE iap.in_shard(account_id, \(shard?.index), \(shard?.count))
                    GROUP BY account_id
                ), classified AS MATERIALIZED (
                    SELECT account_id, oldest,
                           CASE WHEN notified THEN 'notified'
                                WHEN stale AND EXISTS (
                                    SELECT 1 FROM iap.entitlements e
                                    WHERE e.account_id = receipts.account_id
                                      AND (e.state IN ('grace_period', 'billing_retry')
                                           OR (e.entitled AND e.expires_at < \(atRiskUntil))
                                           OR (e.entitled AND EXISTS (
                                                   SELECT 1 FROM iap.transactions t
                                                   WHERE t.transaction_id = e.latest_transaction_id AND t.cancellation_date IS NOT NULL))))
                                     THEN 'at_risk'
                                WHEN cycle THEN 'cycle'
                           END AS reason
                    FROM receipts
                ), planned AS (
                    INSERT INTO iap.run_schedule (run_id, position, account_id, reason)
                    SELECT \(runId), row_number() OVER (ORDER BY priority, oldest NULLS FIRST, account_id), account_id, reason
                    FROM (SELECT account_id, reason, oldest, CASE reason WHEN 'notified' THEN 0 WHEN 'at_risk' THEN 1 ELSE 2 END AS priority
                          FROM classified WHERE reason IS NOT NULL
                          ORDER BY priority, oldest NULLS FIRST, account_id
                          LIMIT \(capacity.map(Int64.init))) AS picked
                    RETURNING reason
                )
                SELECT c.reason, count(*) AS due, (SELECT count(*) FROM planned p WHERE p.reason = c.reason) AS scheduled
                FROM classified c WHERE c.reason IS NOT NULL GROUP BY c.reason
                """)
            var due: [ScheduleReason: Int] = [:]
            var scheduled: [ScheduleReason: Int] = [:]
            for row in rows {
                guard let reason = ScheduleReason(rawValue: try row.decode("reason", as: String.self)) else { continue }
                due[reason] = Int(try row.decode("due", as: Int64.self))
                scheduled[reason] = Int(try row.decode("scheduled", as: Int64.self))
            }
            return (due, scheduled)
        }
    }

    /// Requests an account cost on each endpoint (`history`, `statuses`, both environments) in the
    /// last completed run that asked the App Store Server API about 20 accounts or more.
    public func measuredRequestsPerAccount() async throws -> [ServerAPIEndpoint: Double]? {
        let rows = try await connection.query("""
            SELECT (COALESCE((statistics->'apiRequests'->'history/Production'->>'requests')::float8, 0)
                    + COALESCE((statistics->'apiRequests'->'history/Sandbox'->>'requests')::float8, 0)) / accounts_processed AS history,
                   (COALESCE((statistics->'apiRequests'->'statuses/Production'->>'requests')::float8, 0)
                    + COALESCE((statistics->'apiRequests'->'statuses/Sandbox'->>'requests')::float8, 0)) / accounts_processed AS statuses
            FROM iap.reconciliation_runs
            WHERE status = 'completed' AND accounts_processed >= 20 AND statistics ? 'apiRequests'
            ORDER BY id DESC LIMIT 1
            """)
        guard let row = rows.first else { return nil }
        return [.history: try row.decode("history", as: Double.self), .statuses: try row.decode("statuses", as: Double.self)]
    }
}
