import Foundation
import Postgres
import Reconciliation

/// One run as `runs` lists it: what a person checks first on a morning after.
public struct RunListing: Sendable, Equatable {
    public var id: Int64
    public var kind: String
    public var status: String
    public var isDryRun: Bool
    public var shard: String?
    public var startedAt: Date
    public var finishedAt: Date?
    public var accountsProcessed: Int
    public var corrections: Int
    public var error: String?
}

extension ReconciliationStore {
    /// The most recent runs, newest first (`runs`).
    public func recentRuns(limit: Int) async throws -> [RunListing] {
        try await connection.query("""
            SELECT id, kind, status, dry_run, shard, started_at, finished_at, accounts_processed, corrections, error
            FROM iap.reconciliation_runs ORDER BY started_at DESC, id DESC LIMIT \(limit)
            """).map { row in
            RunListing(
                id: try row.decode("id"), kind: try row.decode("kind"), status: try row.decode("status"), isDryRun: try row.decode("dry_run"),
                shard: try row.decode("shard"), startedAt: try row.decode("started_at"), finishedAt: try row.decode("finished_at"),
                accountsProcessed: try row.decode("accounts_processed"), corrections: try row.decode("corrections"), error: try row.decode("error"))
        }
    }

    /// The latest run that has ended (not `running`; a dry run too): what `report latest`
    /// reports. Nil when no run has ended.
    public func latestEndedRunId() async throws -> Int64? {
        try await connection.query("""
            SELECT id FROM iap.reconciliation_runs WHERE status <> 'running'
            ORDER BY started_at DESC, id DESC LIMIT 1
            """).first?.decode("id")
    }
}
