import Foundation
import Logging
import Postgres
import SchemaMigrations
import Testing
import TestSupport

/// Migrations rewritten for a big database (docs/database.md, "Migrations on a big database"):
/// a database that applied a file's earlier text keeps it, and ends with the same schema as one
/// that applied the new text. `FormerMigrations/` holds the earlier texts, byte for byte as they
/// were committed.
@Suite struct RewrittenMigrationTests {
    /// The earlier texts, as the build embeds a file (its last newline dropped).
    static func former() throws -> [Migration] {
        let folder = TestPaths.repositoryRoot.appending(path: "Tests/PostgresTests/FormerMigrations")
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".sql") }.sorted().map { file in
            var sql = try String(contentsOf: folder.appending(path: file), encoding: .utf8)
            if sql.hasSuffix("\n") { sql.removeLast() }
            return Migration(version: String(file.dropLast(".sql".count)), sql: sql)
        }
    }

    /// The bundled migrations with the earlier texts in place of the rewritten files.
    static func withFormerTexts() throws -> [Migration] {
        let former = Dictionary(uniqueKeysWithValues: try Self.former().map { ($0.version, $0) })
        return Migration.bundled.map { former[$0.version] ?? $0 }
    }

    @Test func everyRewrittenFileNamesItsEarlierText() throws {
        let former = try Self.former()
        #expect(former.count == 8)
        for old in former {
            let new = try #require(Migration.bundled.first { $0.version == old.version })
            #expect(new.checksum != old.checksum, "\(old.version) was not rewritten")
            #expect(new.formerChecksums.contains(old.checksum), "\(old.version) does not name its earlier text's checksum")
        }
    }

    /// A database migrated by the earlier texts passes the rewritten files by, and its schema
    /// (columns, checks and their validation, indexes and their validity, functions, triggers,
    /// storage settings) is the schema a database migrated by the new texts has.
    @Test func aDatabaseOfTheEarlierTextsHasTheSameSchema() async throws {
        let earlier = try await TestDatabase.create("formertexts")
        let current = try await TestDatabase.create("currenttexts")
        let (old, new) = (try await earlier.connect(), try await current.connect())
        try await Migrator(migrations: try Self.withFormerTexts(), logger: .quiet).migrate(old)
        #expect(try await Migrator(logger: .quiet).migrate(old).isEmpty)
        try await Migrator(logger: .quiet).migrate(new)
        let (oldSchema, newSchema) = (try await Self.schema(old), try await Self.schema(new))
        #expect(oldSchema.count > 150)
        #expect(Set(oldSchema).symmetricDifference(newSchema).sorted() == [])
        #expect(oldSchema.count == newSchema.count)
        for session in [old, new] { await session.close() }
        try await earlier.drop()
        try await current.drop()
    }

    /// A description of schema `iap`, a line a thing, in a stable order.
    static func schema(_ connection: PostgresConnection) async throws -> [String] {
        try await connection.query("""
            SELECT 'column ' || c.relname || '.' || a.attname || ' #' || a.attnum || ' ' || format_type(a.atttypid, a.atttypmod)
                   || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || COALESCE(' default ' || pg_get_expr(d.adbin, d.adrelid), '') AS line
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE c.relnamespace = 'iap'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
            UNION ALL
            SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
                   || CASE WHEN convalidated THEN '' ELSE ' NOT VALIDATED' END
            FROM pg_constraint WHERE connamespace = 'iap'::regnamespace
            UNION ALL
            SELECT 'index ' || pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid THEN '' ELSE ' INVALID' END
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'iap'::regnamespace
            UNION ALL
            SELECT 'function ' || proname || ' ' || md5(pg_get_functiondef(oid)) FROM pg_proc WHERE pronamespace = 'iap'::regnamespace
            UNION ALL
            SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = 'iap'::regnamespace AND NOT t.tgisinternal
            UNION ALL
            SELECT 'relation ' || relname || ' ' || relkind::text || COALESCE(' ' || array_to_string(reloptions, ','), '')
            FROM pg_class WHERE relnamespace = 'iap'::regnamespace AND relkind IN ('r', 'S', 'v')
            ORDER BY line
            """).map { try $0.decode("line") }
    }
}
