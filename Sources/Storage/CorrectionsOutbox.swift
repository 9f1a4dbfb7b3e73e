import Foundation
import Postgres
import Reconciliation

/// One applied correction as the outbox gives it (`corrections --after`).
public struct AppliedCorrection: Sendable, Equatable {
    /// The cursor: applied corrections are numbered in the order they were committed.
    public var appliedSeq: Int64
    public var id: Int64
    public var runId: Int64
    public var accountId: String
    public var productId: String
    public var kind: Correction.Kind
    public var reason: String
    public var appliedAt: Date
    /// The entitlement row before and after, as `iap.corrections` keeps them (null: no row).
    public var before: String?
    public var after: String?
}

/// The corrections table read as an outbox (docs/events.md): applied corrections after a cursor,
/// in `applied_seq` order, which is commit order (Migrations/0019), so a consumer that saves the
/// last `applied_seq` it handled reads each correction exactly once.
public enum CorrectionsOutbox {
    /// Calls `body` with each applied correction after `cursor`, at most `limit` of them, read
    /// through a server-side cursor in bounded memory; returns how many there were.
    public static func forEach(
        connection: PostgresConnection, after cursor: Int64, limit: Int?, _ body: (AppliedCorrection) throws -> Void
    ) async throws -> Int {
        var count = 0
        try await connection.withCursor("""
            SELECT applied_seq, id, run_id, account_id, product_id, kind, reason, applied_at, before::text AS before, after::text AS after
            FROM iap.corrections
            WHERE applied_seq > \(cursor)
            ORDER BY applied_seq
            LIMIT \(limit.map(Int64.init) ?? Int64.max)
            """) { rows in
            for try await batch in rows {
                for row in batch {
                    try body(AppliedCorrection(
                        appliedSeq: try row.decode("applied_seq"), id: try row.decode("id"), runId: try row.decode("run_id"),
                        accountId: try row.decode("account_id"), productId: try row.decode("product_id"),
                        kind: try row.decodeRawValue("kind"), reason: try row.decode("reason"),
                        appliedAt: try row.decode("applied_at"), before: try row.decode("before"), after: try row.decode("after")))
                    count += 1
                }
            }
        }
        return count
    }
}
