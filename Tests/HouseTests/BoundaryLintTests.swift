import Foundation
import Testing
import TestSupport

/// Module boundaries the compiler cannot keep, kept by lints over the sources. What it can keep,
/// it does: no store exposes its connection, and every module builds with MemberImportVisibility.
@Suite struct BoundaryLintTests {
    /// A module boundary, kept by a lint: SQL text and libpq are the Postgres module's alone. That
    /// its one splice of names is safe is shown by trying hostile names (`SpliceTests`), not here.
    @Test func onlyThePostgresModuleBuildsSQLText() throws {
        for (path, text) in try TestPaths.sources {
            if text.contains("unsafeSQL:") || text.contains("(unescaped:") {
                #expect(path.hasPrefix("Postgres/"), "\(path) builds SQL from strings")
            }
            if text.contains("executeScript(") {
                #expect(path.hasPrefix("Postgres/") || path.hasPrefix("SchemaMigrations/"), "\(path) runs unbound SQL")
            }
            for line in text.split(separator: "\n") where line.contains("PQexec(") {
                #expect(path.hasPrefix("Postgres/"), "\(path) calls libpq directly")
            }
        }
    }

    /// The database is Storage's. The compiler keeps most of it: no store exposes its connection,
    /// and with MemberImportVisibility a module that does not import Postgres cannot call a
    /// connection's methods even where one is in reach. What it cannot see is left to this lint:
    /// SwiftPM lets a target import a module it only depends on indirectly (its
    /// `--explicit-target-dependency-import-check error` let `import Postgres` in Jobs through when
    /// tried), and the commands import Postgres to connect and to read its errors, so no
    /// transaction is opened, and no statement run, outside Postgres, Storage and the migrations.
    @Test func onlyStorageAndTheCommandsTalkToPostgres() throws {
        for (path, text) in try TestPaths.sources {
            if path.hasPrefix("Jobs/") {
                #expect(!text.contains("import Postgres"), "\(path) imports Postgres")
            }
            guard !["Postgres/", "Storage/", "SchemaMigrations/"].contains(where: path.hasPrefix) else { continue }
            #expect(!text.contains("withTransaction"), "\(path) opens a transaction itself")
            #expect(text.firstMatch(of: /connection\.(query|execute|copy)\(/) == nil, "\(path) runs a statement itself")
        }
    }

    /// A module boundary, kept by a lint: libcurl is the HTTP module's alone. That TLS is verified
    /// is shown by behaviour, below and in TLSVerificationTests.
    @Test func onlyTheHTTPModuleReachesLibcurl() throws {
        for (path, text) in try TestPaths.sources where !path.hasPrefix("HTTP/") && !path.hasPrefix("CCurl/") {
            #expect(!text.contains("CURLOPT_"), "\(path) reaches libcurl around the HTTP module")
        }
    }
}
