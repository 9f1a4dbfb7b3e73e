import Postgres

/// Rows of every kind `prune --before 2026-06-01` must keep or delete (docs/operating.md,
/// "Retention"), each named by what it is: `pruned` lists those that go, by the same names.
public enum RetentionFixture {
    /// Corrections' reasons and notifications' bodies' `name`, of the rows a prune deletes.
    public static let prunedCorrections = ["old dry run's", "old run's superseded"]
    public static let prunedNotifications = ["old V2 not examined", "old V2 examined, unanswered", "old applied v1", "old unmatched v1"]

    public static func fill(_ connection: PostgresConnection) async throws {
        try await connection.executeScript("""
            INSERT INTO iap.reconciliation_runs (id, kind, status, dry_run, started_at, finished_at) VALUES
              (1, 'nightly', 'completed', true,  '2026-01-05 03:15Z', '2026-01-05 04:00Z'),
              (2, 'nightly', 'completed', false, '2026-02-05 03:15Z', '2026-02-05 04:00Z'),
              (3, 'backfill', 'running',  false, '2026-03-05 03:15Z', NULL),
              (4, 'nightly', 'completed', true,  '2026-07-05 03:15Z', '2026-07-05 04:00Z'),
              (5, 'nightly', 'aborted',   false, '2026-04-05 03:15Z', '2026-04-05 04:00Z');
            INSERT INTO iap.corrections (run_id, account_id, product_id, kind, reason, status, applied_at, applied_seq) VALUES
              (1, 'a', 'p', 'revoke', 'old dry run''s', 'planned', NULL, NULL),
              (2, 'a', 'p', 'grant', 'old run''s applied', 'applied', '2026-02-05 03:30Z', 1),
              (2, 'b', 'p', 'revoke', 'old run''s superseded', 'superseded', NULL, NULL),
              (3, 'c', 'p', 'revoke', 'running run''s superseded', 'superseded', NULL, NULL),
              (4, 'a', 'p', 'revoke', 'recent dry run''s', 'planned', NULL, NULL),
              (5, 'd', 'p', 'revoke', 'aborted run''s planned, kept for review', 'planned', NULL, NULL);
            INSERT INTO iap.notifications (id, received_at, body, processed_at, outcome, notification_uuid, consumption_examined_at,
                                           quarantined_at, run_id) VALUES
              (1, '2026-02-01Z', '{"name": "old applied v1"}', '2026-02-02Z', 'applied', NULL, NULL, NULL, 2),
              (2, '2026-02-01Z', '{"name": "old rejected v1"}', '2026-02-02Z', 'rejected', NULL, NULL, NULL, 2),
              (3, '2026-02-01Z', '{"name": "old quarantined"}', NULL, NULL, NULL, NULL, '2026-02-02Z', 2),
              (4, '2026-02-01Z', '{"name": "old unprocessed"}', NULL, NULL, NULL, NULL, NULL, NULL),
              (5, '2026-06-20Z', '{"name": "recent applied v1"}', '2026-06-21Z', 'applied', NULL, NULL, NULL, NULL),
              (6, '2026-02-01Z', '{"name": "old V2 examined, unanswered"}', '2026-02-02Z', 'applied', 'u6', '2026-02-01Z', NULL, 2),
              (7, '2026-02-01Z', '{"name": "old V2 not examined"}', '2026-02-02Z', 'applied', 'u7', NULL, NULL, 2),
              (8, '2026-02-01Z', '{"name": "old V2 answered"}', '2026-02-02Z', 'applied', 'u8', '2026-02-01Z', NULL, 2),
              (9, '2026-02-01Z', '{"name": "old unmatched v1"}', '2026-03-02Z', 'unmatched', NULL, NULL, NULL, 2),
              (10, '2026-05-01Z', '{"name": "processed after the date"}', '2026-06-02Z', 'applied', NULL, NULL, NULL, NULL),
              (11, '2026-02-01Z', '{"name": "old V2 answered under another uuid"}', '2026-02-02Z', 'applied', 'u11', '2026-02-01Z', NULL, 2);
            INSERT INTO iap.consumption_answers (notification_id, notification_uuid, transaction_id, environment, requested_at, deadline, outcome)
            VALUES (8, 'u8', 't8', 'Production', '2026-02-01Z', '2026-02-01 12:00Z', 'sent'),
                   (11, 'u11-as-verified', 't11', 'Production', '2026-02-01Z', '2026-02-01 12:00Z', 'sent');
            """)
    }

    /// What is left: the corrections' reasons and the notifications' names, sorted.
    public static func left(_ connection: PostgresConnection) async throws -> (corrections: [String], notifications: [String]) {
        (try await connection.query("SELECT reason FROM iap.corrections ORDER BY reason").map { try $0.decode("reason") },
         try await connection.query("SELECT body->>'name' AS name FROM iap.notifications ORDER BY 1").map { try $0.decode("name") })
    }
}
