import AppStoreModels
import CivilCalendar
import Foundation
import Postgres
import Reconciliation

extension ReconciliationStore {
    // MARK: - Applying planned corrections

    /// What applying one batch did.
    public struct ApplyResult: Sendable {
        public var applied = 0
        public var superseded = 0
        /// The id to continue after; nil when nothing was left.
        public var lastId: Int64?
    }

    /// Applies up to `limit` planned corrections of `runId` after `afterId`, in one transaction:
    /// each entitlement change lands together with its correction's `applied_at`. A correction
    /// whose entitlement changed since it was planned (its `before` no longer matches the row)
    /// is marked `superseded` instead: the app server's newer write wins, and the next run decides.
    /// The applied ones are numbered in commit order (`applied_seq`) and announced with NOTIFY,
    /// which PostgreSQL delivers at the commit, and only then.
    /// Its length is SQL: the statements of one transaction, read in order.
    public func applyPlanned(runId: Int64, afterId: Int64, limit: Int, now: Date) async throws -> ApplyResult {
        try await connection.withTransaction { connection in
            // `before` comes back as the entitlement row it describes (PostgreSQL reads the JSON), so
            // comparing it with the stored row needs no JSON decoding here.
            let planned = try await connection.query("""
                SELECT c.id AS correction_id, c.account_id AS correction_account_id, c.product_id AS correction_product_id,
                       c.before IS NOT NULL AS has_before, c.after::text AS after, b.*
                FROM iap.corrections c LEFT JOIN LATERAL jsonb_populate_record(NULL::iap.entitlements, c.before) AS b ON true
                WHERE c.run_id = \(runId) AND c.status = 'planned' AND c.id > \(afterId)
                ORDER BY c.id LIMIT \(limit) FOR UPDATE OF c
                """)
            var result = ApplyResult()
            guard let last = planned.last else { return result }
            result.lastId = try last.decode("correction_id")
            let accounts = Array(Set(try planned.map { try $0.decode("correction_account_id", as: String.self) }))
            let current = try await connection.query("""
                SELECT * FROM iap.entitlements WHERE account_id = ANY(\(accounts)) FOR UPDATE
                """)
            var stored: [String: Entitlement] = [:]
            for row in current {
                let entitlement = try Entitlement(row: row)
                stored[entitlement.accountId + "\u{0}" + entitlement.productId] = entitlement
            }
            // Corrections planned against an existing row update it (locked above); those planned
            // where no row existed insert one only if still absent: a row the app server inserted
            // meanwhile cannot be locked in advance, and must not be overwritten.
            var updates: [(id: Int64, after: String)] = []
            var inserts: [(id: Int64, key: String, after: String)] = []
            var superseded: [Int64] = []
            var appliedHere: [String: String] = [:]
            for row in planned {
                let id: Int64 = try row.decode("correction_id")
                let key = try row.decode("correction_account_id", as: String.self) + "\u{0}"
                    + row.decode("correction_product_id", as: String.self)
                let before = try row.decode("has_before", as: Bool.self) ? try Entitlement(row: row) : nil
                // A correction applied earlier in this batch changed the row it compares with.
                let current = try appliedHere[key].map { try EntitlementJSON.decode($0) } ?? stored[key]
                if current == before {
                    let after: String = try row.decode("after")
                    if current == nil { inserts.append((id, key, after)) } else { updates.append((id, after)) }
                    appliedHere[key] = after
                } else {
                    superseded.append(id)
                }
            }
            var applied: [Int64] = []
            if !inserts.isEmpty {
                let inserted = Set(try await connection.query("""
                    INSERT INTO iap.entitlements AS e (
                        account_id, product_id, original_transaction_id, latest_transaction_id, state, entitled,
                        expires_at, grace_period_expires_at, auto_renew, auto_renew_product_id, environment,
                        ownership_type, refunded_at, updated_at)
                    SELECT r.account_id, r.product_id, r.original_transaction_id, r.latest_transaction_id, r.state,
                           r.entitled, r.expires_at, r.grace_period_expires_at, r.auto_renew, r.auto_renew_product_id,
                           r.environment, r.ownership_type, r.refunded_at, \(now)
                    FROM unnest(\(PostgresArray(inserts.map(\.after)))::jsonb[]) AS a(after),
                         jsonb_populate_record(NULL::iap.entitlements, a.after) AS r
                    ON CONFLICT (account_id, product_id) DO NOTHING
                    RETURNING e.account_id, e.product_id
                    """).map { try $0.decode("account_id", as: String.self) + "\u{0}" + $0.decode("product_id", as: String.self) })
                for insert in inserts {
                    if inserted.contains(insert.key) { applied.append(insert.id) } else { superseded.append(insert.id) }
                }
            }
            if !updates.isEmpty {
                try await connection.execute("""
                    UPDATE iap.entitlements AS e SET
                        original_transaction_id = r.original_transaction_id,
                        latest_transaction_id   = r.latest_transaction_id,
                        state                   = r.state,
                        entitled                = r.entitled,
                        expires_at              = r.expires_at,
                        grace_period_expires_at = r.grace_period_expires_at,
                        auto_renew              = r.auto_renew,
                        auto_renew_product_id   = r.auto_renew_product_id,
                        environment             = r.environment,
                        ownership_type          = r.ownership_type,
                        refunded_at             = r.refunded_at,
                        updated_at              = \(now)
                    FROM unnest(\(PostgresArray(updates.map(\.after)))::jsonb[]) AS a(after),
                         jsonb_populate_record(NULL::iap.entitlements, a.after) AS r
                    WHERE e.account_id = r.account_id AND e.product_id = r.product_id
                    """)
                applied += updates.map(\.id)
            }
            if !applied.isEmpty {
                // Numbered under the outbox lock, held to the commit: see RunLock.outboxKey.
                try await connection.execute("SELECT pg_advisory_xact_lock(\(RunLock.outboxKey))")
                let numbered = try await connection.query("""
                    UPDATE iap.corrections AS c SET status = 'applied', applied_at = \(now), applied_seq = o.seq
                    FROM (SELECT id, nextval('iap.corrections_applied_seq') AS seq
                          FROM (SELECT unnest(\(PostgresArray(applied))::bigint[]) AS id ORDER BY 1) AS ids) AS o
                    WHERE c.id = o.id
                    RETURNING c.id, c.applied_seq, c.kind
                    """)
                if let event = CorrectionsEvent(runId: runId, applied: try numbered.map {
                    (id: try $0.decode("id"), seq: try $0.decode("applied_seq"), kind: try $0.decode("kind"))
                }) {
                    try await connection.execute("SELECT pg_notify(\(CorrectionsEvent.channel), \(try ProgramJSON.line(event)))")
                }
            }
            if !superseded.isEmpty {
                try await connection.execute("""
                    UPDATE iap.corrections SET status = 'superseded'
                    WHERE id = ANY(\(PostgresArray(superseded))::bigint[])
                    """)
            }
            result.applied = applied.count
            result.superseded = superseded.count
            return result
        }
    }
}
