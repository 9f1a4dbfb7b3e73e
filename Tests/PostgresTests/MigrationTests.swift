import Logging
import Foundation
import Postgres
import SchemaMigrations
import Testing
import TestSupport

@Suite struct MigrationTests {
    @Test func migrateTwiceAppliesOnce() async throws {
        let database = try await TestDatabase.create("migrate")
        let connection = try await database.connect()
        let first = try await Migrator(logger: .quiet).migrate(connection)
        #expect(first == Migration.bundled.map(\.version))
        #expect(first.first == "0001_schema")
        let second = try await Migrator(logger: .quiet).migrate(connection)
        #expect(second.isEmpty)
        let recorded = try await connection.query("SELECT version FROM iap.schema_migrations ORDER BY version")
        #expect(try recorded.map { try $0.decode("version", as: String.self) } == first)
        await connection.close()
        try await database.drop()
    }

    @Test func concurrentMigratorsApplyEachMigrationOnce() async throws {
        let database = try await TestDatabase.create("migrateconcurrent")
        let applied = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<4 {
                group.addTask {
                    let connection = try await database.connect()
                    defer { Task { await connection.close() } }
                    return try await Migrator(logger: .quiet).migrate(connection)
                }
            }
            return try await group.reduce(into: [String]()) { $0 += $1 }
        }
        #expect(applied.sorted() == Migration.bundled.map(\.version).sorted())
        try await database.drop()
    }

    @Test func aChangedMigrationIsRefused() async throws {
        let database = try await TestDatabase.create("migratechanged")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        var edited = Migration.bundled
        edited[0].sql += "\n-- edited\n"
        await #expect(throws: Migrator.Failure.self) { try await Migrator(migrations: edited, logger: .quiet).migrate(connection) }
        await connection.close()
        try await database.drop()
    }

    /// A migration whose table another session holds (a run's open transaction) waits at most its
    /// lock timeout, so the sessions queued behind it are not stalled, is rolled back whole and
    /// tried again; once the holder ends, the next try applies it.
    @Test func aMigrationMeetingAHeldLockStallsNobodyAndIsTriedAgain() async throws {
        let database = try await TestDatabase.create("migratelock")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        let holder = try await database.connect()
        let reader = try await database.connect()
        try await holder.execute("BEGIN")
        try await holder.execute("SELECT count(*) FROM iap.products")  // ACCESS SHARE until the transaction ends
        let next = Migration.bundled + [Migration(version: "9999_column", sql: "ALTER TABLE iap.products ADD COLUMN note text;")]
        var migrator = Migrator(migrations: next, logger: .quiet)
        (migrator.lockTimeout, migrator.lockAttempts, migrator.lockRetryDelay) = (.milliseconds(200), 3, .milliseconds(300))

        await #expect(throws: Migrator.LockNotTaken.self) { try await migrator.migrate(connection) }
        // Nothing of it applied, and a query of the table never waited behind it.
        #expect(try await connection.query("SELECT count(*) AS n FROM iap.schema_migrations WHERE version = '9999_column'")[0].decode("n", as: Int.self) == 0)
        migrator.lockAttempts = 50  // this one outlasts the holder, however slow the machine
        let waiting = Task { [migrator] in try await migrator.migrate(connection) }
        try await Task.sleep(for: .milliseconds(100))
        // Queued behind a DDL statement that waited without a limit, this read would wait for the holder,
        // which ends only after it: its statement timeout would end it with an error instead.
        try await reader.execute("SET statement_timeout = '20s'")
        _ = try await reader.query("SELECT count(*) FROM iap.products")
        try await holder.execute("COMMIT")
        let applied = try await waiting.value
        #expect(applied == ["9999_column"])
        for session in [holder, reader, connection] { await session.close() }
        try await database.drop()
    }

    @Test func aFailingMigrationLeavesNothingBehind() async throws {
        let database = try await TestDatabase.create("migratefail")
        let connection = try await database.connect()
        let broken = Migration.bundled + [Migration(version: "9999_broken", sql: "CREATE TABLE iap.half (id int); SELECT 1/0;")]
        await #expect(throws: PostgresError.self) { try await Migrator(migrations: broken, logger: .quiet).migrate(connection) }
        let tables = try await connection.query("SELECT count(*) AS n FROM pg_tables WHERE schemaname = 'iap' AND tablename = 'half'")
        #expect(try tables[0].decode("n", as: Int.self) == 0)
        let versions = try await connection.query("SELECT version FROM iap.schema_migrations WHERE version = '9999_broken'")
        #expect(versions.isEmpty)
        await connection.close()
        try await database.drop()
    }

    /// A file marked to run without a transaction (`CREATE INDEX CONCURRENTLY`) runs statement by
    /// statement; stopped halfway, it is not recorded, and applied again from its start it ends
    /// with every index built and valid.
    @Test func aMigrationWithoutATransactionIsAppliedAgainFromItsStart() async throws {
        let database = try await TestDatabase.create("migrateconcurrently")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        let sql = """
            \(Migration.withoutTransactionMark)
            -- two indexes
            DROP INDEX CONCURRENTLY IF EXISTS iap.test_a_idx;
            CREATE INDEX CONCURRENTLY test_a_idx ON iap.app_receipts (created_at);
            DROP INDEX CONCURRENTLY IF EXISTS iap.test_b_idx;
            CREATE INDEX CONCURRENTLY test_b_idx ON iap.app_receipts (updated_at, id);
            """
        // The second build fails (a column that is not there): the first index stands, nothing recorded.
        let broken = Migration(version: "9999_indexes", sql: sql.replacingOccurrences(of: "(updated_at, id)", with: "(no_such_column)"))
        await #expect(throws: PostgresError.self) { try await Migrator(migrations: Migration.bundled + [broken], logger: .quiet).migrate(connection) }
        #expect(try await connection.query("SELECT 1 FROM iap.schema_migrations WHERE version = '9999_indexes'").isEmpty)
        // Applied again (the file fixed, as an operator would): every index built and valid, recorded once.
        let fixed = Migration(version: "9999_indexes", sql: sql)
        #expect(try await Migrator(migrations: Migration.bundled + [fixed], logger: .quiet).migrate(connection) == ["9999_indexes"])
        let valid = try await connection.query("""
            SELECT count(*) AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE c.relname IN ('test_a_idx', 'test_b_idx') AND i.indisvalid
            """)
        #expect(try valid[0].decode("n", as: Int.self) == 2)
        #expect(try await Migrator(migrations: Migration.bundled + [fixed], logger: .quiet).migrate(connection).isEmpty)
        await connection.close()
        try await database.drop()
    }

    /// A file of `IF NOT EXISTS` builds stopped halfway: the index it finished stays as it is (not
    /// dropped and built again: a big table's index may take an attempt of its own), and the one it
    /// left invalid is dropped by migrate and built anew.
    @Test func aStoppedBuildKeepsWhatItFinishedAndRebuildsWhatItLeftInvalid() async throws {
        let database = try await TestDatabase.create("migrateinvalid")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.executeScript("""
            CREATE INDEX test_done_idx ON iap.app_receipts (created_at);
            CREATE INDEX test_left_idx ON iap.app_receipts (updated_at, id);
            UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'iap.test_left_idx'::regclass;
            """)
        let done = try await connection.query("SELECT 'iap.test_done_idx'::regclass::oid::bigint AS oid")[0].decode("oid", as: Int64.self)
        let sql = """
            \(Migration.withoutTransactionMark)
            CREATE INDEX CONCURRENTLY IF NOT EXISTS test_done_idx ON iap.app_receipts (created_at);
            CREATE INDEX CONCURRENTLY IF NOT EXISTS test_left_idx ON iap.app_receipts (updated_at, id);
            """
        #expect(try await Migrator(migrations: Migration.bundled + [Migration(version: "9999_indexes", sql: sql)], logger: .quiet)
            .migrate(connection) == ["9999_indexes"])
        let rows = try await connection.query("""
            SELECT c.relname, c.oid::bigint AS oid, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE c.relname IN ('test_done_idx', 'test_left_idx') ORDER BY c.relname
            """)
        #expect(try rows.map { try $0.decode("indisvalid", as: Bool.self) } == [true, true])
        #expect(try rows[0].decode("oid", as: Int64.self) == done)
        await connection.close()
        try await database.drop()
    }

    /// Every table and column of docs/database.md, with its type and nullability.
    static let contract: [String: [(column: String, type: String, nullable: Bool)]] = [
        "app_receipts": [
            ("id", "bigint", false), ("account_id", "text", false), ("bundle_id", "text", true),
            ("latest_receipt", "text", false), ("environment", "text", true),
            ("last_verified_at", "timestamp with time zone", true), ("last_status", "integer", true),
            ("next_attempt_at", "timestamp with time zone", true), ("created_at", "timestamp with time zone", false),
            ("updated_at", "timestamp with time zone", false),
        ],
        "products": [
            ("product_id", "text", false), ("type", "text", false), ("duration", "interval", true),
            ("entitlement", "text", true), ("price", "numeric", true), ("currency", "text", true),
        ],
        "entitlements": [
            ("account_id", "text", false), ("product_id", "text", false), ("original_transaction_id", "text", false),
            ("latest_transaction_id", "text", true), ("state", "text", false), ("entitled", "boolean", false),
            ("expires_at", "timestamp with time zone", true), ("grace_period_expires_at", "timestamp with time zone", true),
            ("auto_renew", "boolean", true), ("auto_renew_product_id", "text", true), ("environment", "text", true),
            ("ownership_type", "text", true), ("refunded_at", "timestamp with time zone", true),
            ("updated_at", "timestamp with time zone", false),
        ],
        "transactions": [
            ("transaction_id", "text", false), ("account_id", "text", false), ("original_transaction_id", "text", true),
            ("product_id", "text", false), ("purchase_date", "timestamp with time zone", true),
            ("original_purchase_date", "timestamp with time zone", true), ("expires_date", "timestamp with time zone", true),
            ("cancellation_date", "timestamp with time zone", true), ("cancellation_reason", "integer", true),
            ("is_upgraded", "boolean", true), ("is_trial_period", "boolean", true),
            ("is_in_intro_offer_period", "boolean", true), ("quantity", "integer", true),
            ("web_order_line_item_id", "text", true), ("subscription_group_identifier", "text", true),
            ("offer_code_ref_name", "text", true), ("promotional_offer_id", "text", true),
            ("ownership_type", "text", true), ("environment", "text", true),
        ],
        "reconciliation_runs": [
            ("id", "bigint", false), ("kind", "text", false), ("status", "text", false), ("dry_run", "boolean", false),
            ("started_at", "timestamp with time zone", false), ("finished_at", "timestamp with time zone", true),
        ],
        "corrections": [
            ("id", "bigint", false), ("run_id", "bigint", false), ("account_id", "text", false),
            ("product_id", "text", false), ("kind", "text", false), ("reason", "text", false), ("before", "jsonb", true),
            ("after", "jsonb", true), ("applied_at", "timestamp with time zone", true),
        ],
        "notifications": [
            ("id", "bigint", false), ("received_at", "timestamp with time zone", false), ("body", "jsonb", false),
            ("processed_at", "timestamp with time zone", true), ("outcome", "text", true), ("account_id", "text", true),
            ("run_id", "bigint", true),
        ],
    ]

    @Test func schemaMatchesTheContractColumnByColumn() async throws {
        let database = try await TestDatabase.create("schema")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        let rows = try await connection.query("""
            SELECT table_name, column_name, data_type, is_nullable = 'YES' AS nullable
            FROM information_schema.columns WHERE table_schema = 'iap'
            """)
        var actual: [String: [String: (type: String, nullable: Bool)]] = [:]
        for row in rows {
            actual[try row.decode("table_name"), default: [:]][try row.decode("column_name")] =
                (try row.decode("data_type"), try row.decode("nullable"))
        }
        for (table, columns) in Self.contract {
            for column in columns {
                let found = actual[table]?[column.column]
                #expect(found?.type == column.type, "iap.\(table).\(column.column) should be \(column.type)")
                #expect(found?.nullable == column.nullable, "iap.\(table).\(column.column) nullability")
            }
        }
        let keys = try await connection.query("""
            SELECT tc.table_name, string_agg(kcu.column_name, ',' ORDER BY kcu.ordinal_position) AS columns
            FROM information_schema.table_constraints tc
            JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name)
            WHERE tc.table_schema = 'iap' AND tc.constraint_type = 'PRIMARY KEY'
            GROUP BY tc.table_name
            """)
        var primaryKeys: [String: String] = [:]
        for row in keys { primaryKeys[try row.decode("table_name")] = try row.decode("columns") }
        #expect(primaryKeys["app_receipts"] == "id")
        #expect(primaryKeys["entitlements"] == "account_id,product_id")
        #expect(primaryKeys["transactions"] == "transaction_id")
        #expect(primaryKeys["products"] == "product_id")
        #expect(primaryKeys["reconciliation_runs"] == "id")
        #expect(primaryKeys["notifications"] == "id")
        // Defaults the app server relies on when it inserts receipts.
        try await connection.execute("INSERT INTO iap.app_receipts (account_id, latest_receipt) VALUES ('a', 'b')")
        let defaults = try await connection.query("SELECT created_at, updated_at FROM iap.app_receipts")
        #expect(try defaults[0].decode("created_at", as: Date?.self) != nil)
        // The closed vocabularies of docs/database.md are enforced.
        await #expect(throws: PostgresError.self) {
            try await connection.execute("""
                INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, state, entitled, updated_at)
                VALUES ('a', 'p', 'o', 'active', false, now())
                """)
        }
        await connection.close()
        try await database.drop()
    }
}
