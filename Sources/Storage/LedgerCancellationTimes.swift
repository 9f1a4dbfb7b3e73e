import Foundation
import Logging
import Postgres

/// A repair `migrate` makes after the files (docs/database.md, "Migrations on a big database"):
/// ledger rows whose cancellation an undated v1 REFUND told first kept no time of Apple's word
/// (`apple_as_of`), so a signed word from before the refund, read later, cleared it and the
/// journal reversed a refund Apple never reversed. Each such row's time becomes its
/// cancellation's, as the ledger upsert now writes it: ten thousand ledger rows a statement, in
/// transaction id order, each moving the cursor with its work.
public enum LedgerCancellationTimes {
    static let name = "ledger_cancellation_times"

    /// Repairs the rest, `pageSize` ledger rows a statement; returns how many rows it repaired.
    public static func resume(connection: PostgresConnection, pageSize: Int = 10_000, logger: Logger) async throws -> Int {
        var repaired = 0
        while true {
            let step = try await DatabaseRetry.run(logger: logger) { try await connection.withTransaction { connection -> Int? in
                guard let cursor = try await connection.query("""
                    SELECT COALESCE(after_key, '') AS after_key FROM iap.schema_backfills WHERE name = \(name) AND finished_at IS NULL FOR UPDATE
                    """).first else { return nil }
                let after: String = try cursor.decode("after_key")
                let row = try await connection.query("""
                    WITH page AS (SELECT transaction_id FROM iap.transactions WHERE transaction_id > \(after) ORDER BY transaction_id LIMIT \(pageSize)),
                    repaired AS (
                        UPDATE iap.transactions t SET apple_as_of = t.cancellation_date
                        WHERE t.transaction_id IN (SELECT transaction_id FROM page) AND t.cancellation_date IS NOT NULL
                          AND (t.apple_as_of IS NULL OR t.apple_as_of < t.cancellation_date)
                        RETURNING 1
                    )
                    SELECT (SELECT max(transaction_id) FROM page) AS last, (SELECT count(*) FROM repaired) AS repaired
                    """)[0]
                let count: Int = try row.decode("repaired")
                guard let last: String = try row.decode("last") else {
                    try await connection.execute("UPDATE iap.schema_backfills SET finished_at = now() WHERE name = \(name)")
                    return nil
                }
                try await connection.execute("""
                    UPDATE iap.schema_backfills SET after_key = \(last), done = done + \(count) WHERE name = \(name)
                    """)
                return count
            } }
            guard let step else { break }
            repaired += step
        }
        if repaired > 0 { logger.notice("ledger.cancellation_times_repaired", metadata: ["ledger.rows": .stringConvertible(repaired)]) }
        return repaired
    }
}
