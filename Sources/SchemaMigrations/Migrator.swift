import CivilCalendar
import Foundation
import Hashing
import Logging
import Postgres

/// One numbered SQL file from `Migrations/`.
public struct Migration: Sendable, Equatable {
    /// The file name without `.sql`, e.g. `0001_schema`; applied in this order.
    public var version: String
    public var sql: String
    /// FNV-1a of the SQL text: an applied migration whose file changed afterwards is refused.
    public var checksum: String { fnv1a64(sql) }

    public init(version: String, sql: String) {
        self.version = version
        self.sql = sql
    }

    /// The first line that marks a file applied statement by statement, outside a transaction:
    /// `CREATE INDEX CONCURRENTLY` on a table the app server writes all day, which a transaction
    /// would hold locked against its writes for the whole build.
    public static let withoutTransactionMark = "-- migrate: without a transaction"

    /// A line naming the checksum of an earlier text of this file (`-- migrate: formerly <checksum>`),
    /// which a database that applied that text keeps: a statement too heavy for a big database
    /// moved out to a later file that a database holding its effect passes over (`IF NOT EXISTS`).
    /// Such a rewrite must leave the schema as the earlier text left it once every later file ran.
    public static let formerlyMark = "-- migrate: formerly "

    /// The checksums of this file's earlier texts (`formerlyMark`).
    public var formerChecksums: Set<String> {
        Set(sql.split(separator: "\n").compactMap { line in
            line.hasPrefix(Self.formerlyMark) ? String(line.dropFirst(Self.formerlyMark.count)).trimmingCharacters(in: .whitespaces) : nil
        })
    }

    /// Applied statement by statement, each on its own (see `withoutTransactionMark`). Such a file
    /// must be safe to apply again from its start: it is recorded only once every statement ran.
    public var isWithoutTransaction: Bool { sql.hasPrefix(Self.withoutTransactionMark) }

    /// Its statements, for a file applied without a transaction: each ends with `;` at the end of
    /// a line; comment lines are dropped.
    var statements: [String] {
        var statements: [String] = []
        var current: [Substring] = []
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, !trimmed.hasPrefix("--") else { continue }
            current.append(line)
            if trimmed.hasSuffix(";") {
                statements.append(current.joined(separator: "\n"))
                current = []
            }
        }
        if !current.isEmpty { statements.append(current.joined(separator: "\n")) }
        return statements
    }

    /// The files of `Migrations/`, compiled in at build time.
    public static let bundled: [Migration] = embeddedMigrations.map {
        Migration(version: String($0.fileName.dropLast(".sql".count)), sql: $0.sql)
    }
}

/// Applies migrations once each, in order, each in its own transaction (but a file marked
/// `Migration.withoutTransactionMark`, statement by statement), recorded in
/// `iap.schema_migrations`. Safe to run twice and from several processes at once: an advisory
/// lock makes the others wait (polling it), after which they find nothing left to do.
public struct Migrator: Sendable {
    /// `pg_advisory_lock` key for migrations ("rr-migr").
    static let lockKey: Int64 = 0x7272_2D6D_6967_72
    public var migrations: [Migration]
    public var logger: Logger
    /// How long a migration's statement waits for a table lock (a run or the app holding the
    /// table) before its transaction gives up and is tried again later: a DDL statement waiting in
    /// the lock queue would stall every later query of that table, a running night's included.
    public var lockTimeout: Duration = .seconds(5)
    /// Tries of a migration that keeps meeting a held lock, `lockRetryDelay` apart, before `migrate` fails.
    public var lockAttempts = 12
    public var lockRetryDelay: Duration = .seconds(5)

    public init(migrations: [Migration] = Migration.bundled, logger: Logger) {
        self.migrations = migrations
        self.logger = logger
    }

    /// The database and this build disagree (a migration this build does not know, or one changed
    /// after it was applied): no retry mends it.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// A migration met a held table lock on every try: another session holds the table (a run,
    /// the app); `migrate` can be run again once it ends.
    public struct LockNotTaken: Error, CustomStringConvertible {
        public var version: String
        public var attempts: Int
        public var description: String {
            "migration \(version) waited \(attempts) times for a table lock another session holds (a run, or your app): "
                + "nothing of it was applied; run migrate again when that session ends"
        }
    }

    /// Applies what is missing and returns the versions it applied (empty when up to date).
    @discardableResult
    public func migrate(_ connection: PostgresConnection) async throws -> [String] {
        // Polled, not waited for in one statement: a statement waiting for the lock holds a
        // snapshot, and the holder's CREATE INDEX CONCURRENTLY waits for every older snapshot to end.
        while try await !connection.query("SELECT pg_try_advisory_lock(\(Self.lockKey)) AS taken")[0].decode("taken", as: Bool.self) {
            try await Task.sleep(for: .milliseconds(100))
        }
        do {
            let applied = try await applyMissing(connection)
            try await connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))")
            return applied
        } catch {
            _ = try? await connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))")
            throw error
        }
    }

    private func applyMissing(_ connection: PostgresConnection) async throws -> [String] {
        try await connection.executeScript("""
            CREATE SCHEMA IF NOT EXISTS iap;
            CREATE TABLE IF NOT EXISTS iap.schema_migrations (
                version    text PRIMARY KEY,
                checksum   text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            );
            """)
        var recorded: [String: String] = [:]
        for row in try await connection.query("SELECT version, checksum FROM iap.schema_migrations") {
            recorded[try row.decode("version")] = try row.decode("checksum", as: String.self)
        }
        let known = Set(migrations.map(\.version))
        if let unknown = recorded.keys.sorted().first(where: { !known.contains($0) }) {
            throw Failure(description: "the database has migration \(unknown), which this build does not know: it is newer than this program")
        }
        var applied: [String] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) {
            if let checksum = recorded[migration.version] {
                guard checksum == migration.checksum || migration.formerChecksums.contains(checksum) else {
                    throw Failure(description: "migration \(migration.version) was changed after it was applied; add a new migration instead")
                }
                continue
            }
            logger.info("migration.apply", metadata: ["migration.version": "\(migration.version)"])
            if migration.isWithoutTransaction {
                try await dropInvalidIndexes(connection)
                for statement in migration.statements { try await connection.executeScript(statement) }
                try await connection.execute(
                    "INSERT INTO iap.schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))")
                applied.append(migration.version)
                continue
            }
            try await applyInTransaction(migration, connection)
            applied.append(migration.version)
        }
        return applied
    }
}

extension Migrator {
    /// The indexes of schema `iap` a `CREATE INDEX CONCURRENTLY` left invalid when it stopped
    /// halfway (a killed pod, a lost connection): dropped before a file of such statements is
    /// applied again, whose `IF NOT EXISTS` then builds them anew and keeps every index an earlier
    /// attempt finished, so that a migration too long for one attempt still gets done.
    func dropInvalidIndexes(_ connection: PostgresConnection) async throws {
        // The statement is PostgreSQL's own format(), the name quoted by %I.
        let invalid = try await connection.query("""
            SELECT c.relname, format('DROP INDEX CONCURRENTLY IF EXISTS iap.%I', c.relname) AS drop
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'iap' AND NOT i.indisvalid ORDER BY c.relname
            """)
        for row in invalid {
            let name: String = try row.decode("relname")
            logger.notice("migration.invalid_index_dropped", metadata: ["index": "\(name)"])
            try await connection.executeScript(try row.decode("drop", as: String.self))
        }
    }

    /// One migration in its transaction, its statements waiting at most `lockTimeout` for a lock;
    /// one that met a held lock is rolled back whole and tried again, up to `lockAttempts` times.
    func applyInTransaction(_ migration: Migration, _ connection: PostgresConnection) async throws {
        let timeout = "\(lockTimeout.wholeMilliseconds)ms"
        for attempt in 1...max(1, lockAttempts) {
            do {
                try await connection.withTransaction { connection in
                    try await connection.execute("SELECT set_config('lock_timeout', \(timeout), true)")
                    try await connection.executeScript(migration.sql)
                    try await connection.execute(
                        "INSERT INTO iap.schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))")
                }
                return
            } catch let error as PostgresError where error.sqlState == "55P03" {
                logger.warning("migration.lock_wait", metadata: [
                    "migration.version": "\(migration.version)", "migration.attempt": .stringConvertible(attempt), "error": "\(error)",
                ])
                if attempt < lockAttempts { try await Task.sleep(for: lockRetryDelay) }
            }
        }
        throw LockNotTaken(version: migration.version, attempts: max(1, lockAttempts))
    }
}

func fnv1a64(_ text: String) -> String {
    var hash = FNV1a()
    hash.combine(text)
    return hash.hex
}
