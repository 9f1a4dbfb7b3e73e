import Foundation
import Testing
import TestSupport

/// Secrets stay secret, SQL stays bound, TLS stays verified.
@Suite struct SecurityTests {
    static var sources: [(path: String, text: String)] {
        get throws {
            let root = TestPaths.repositoryRoot.appending(path: "Sources")
            let enumerator = FileManager.default.enumerator(atPath: root.path)!
            var files: [(String, String)] = []
            while let path = enumerator.nextObject() as? String {
                guard path.hasSuffix(".swift") || path.hasSuffix(".h") else { continue }
                files.append((path, try String(contentsOf: root.appending(path: path), encoding: .utf8)))
            }
            return files
        }
    }

    /// Values travel as binds: SQL text is spliced only in the Postgres module, for identifiers it chooses.
    @Test func noStringBuiltSQL() throws {
        for (path, text) in try Self.sources {
            if text.contains("unsafeSQL:") || text.contains("(unescaped:") {
                #expect(path.hasPrefix("Postgres/"), "\(path) builds SQL from strings")
            }
            if text.contains("executeScript(") {
                #expect(path.hasPrefix("Postgres/") || path.hasPrefix("SchemaMigrations/"), "\(path) runs unbound SQL")
            }
            // A query literal must not interpolate plain strings into SQL outside the bind mechanism.
            for line in text.split(separator: "\n") where line.contains("PQexec(") {
                #expect(path.hasPrefix("Postgres/"), "\(path) calls libpq directly")
            }
        }
    }

    /// There is no switch to turn TLS verification off.
    @Test func tlsVerificationIsAlwaysOn() throws {
        let http = try Self.sources.filter { $0.path.hasPrefix("HTTP/") || $0.path.hasPrefix("CCurl/") }
        let text = http.map(\.text).joined()
        #expect(text.contains("CURLOPT_SSL_VERIFYPEER, 1"))
        #expect(text.contains("CURLOPT_SSL_VERIFYHOST, 2"))
        #expect(!text.contains("VERIFYPEER, 0") && !text.contains("VERIFYHOST, 0") && !text.contains("insecure"))
        for (path, text) in try Self.sources where !path.hasPrefix("HTTP/") && !path.hasPrefix("CCurl/") {
            #expect(!text.contains("CURLOPT_"), "\(path) reaches libcurl around the HTTP module")
        }
    }

    /// The shared secret and the database password appear in no log line, report, metric or output.
    @Test func secretsNeverReachLogsOrReports() async throws {
        try await RunWorld.with("secrets") { world in
            try await OperationsTests.populate(world, count: 6)
            try await world.addReceipt("broken", "not base64 at all!")
            let password = "db-pa55word-\(UUID().uuidString.prefix(8))"
            // Trust authentication ignores the password, so it can sit in the URL like a real one.
            let url = world.database.connectionString + " password=\(password)"
            let report = world.reportRoot.appending(path: "secret-report")
            let metrics = world.reportRoot.appending(path: "metrics.prom")
            var environment = OperationsTests.environment(world)
            environment["DATABASE_URL"] = url
            let result = try await CLIProcess.run(
                ["run", "--report-dir", report.path, "--metrics-file", metrics.path, "--log-level", "trace", "--log-format", "json"],
                environment: environment)
            #expect(result.status == 0, "\(result.stderr)")
            var everything = result.stdout + result.stderr
            for file in try FileManager.default.contentsOfDirectory(atPath: report.path) {
                everything += try String(contentsOf: report.appending(path: file), encoding: .utf8)
            }
            everything += try String(contentsOf: metrics, encoding: .utf8)
            everything += try await CLIProcess.run(["report", "1", "--format", "json"], environment: environment).stdout
            let stored = try await world.connection.query("SELECT options::text AS o, statistics::text AS s FROM iap.reconciliation_runs")
            everything += try stored.map { try $0.decode("o", as: String.self) + $0.decode("s", as: String.self) }.joined()
            #expect(everything.contains("run.started"))  // the logs really were captured
            #expect(!everything.contains(world.secret))
            #expect(!everything.contains(password))
            // A database that refuses names where it is, never the password.
            environment["DATABASE_URL"] = "postgresql://alice:\(password)@127.0.0.1:1/ledger"
            let refused = try await CLIProcess.run(["migrate"], environment: environment)
            #expect(refused.status == 1)
            #expect(refused.stderr.contains("127.0.0.1:1/ledger as alice"))
            #expect(refused.stderr.contains("connection refused"))
            #expect(!refused.stderr.contains(password))
        }
    }

    /// libpq echoes what it parsed: a `%` that is no escape comes back quoted, an unescaped `@`
    /// makes the password's tail a host name in its message. Neither reaches the log.
    static let awkwardPasswords: [(uri: String, secretPart: String, status: Int32)] = [
        ("postgresql://alice:s3cr%zz-tailA@127.0.0.1:1/ledger", "zz-tailA", 2),
        ("postgresql://alice:pa@ss-tailB@127.0.0.1:1/ledger", "ss-tailB", 2),
        ("postgresql://alice:pa%40ss%25-tailC@127.0.0.1:1/ledger", "tailC", 1),  // well encoded: only refused by the server
        ("host=127.0.0.1 port=1 dbname=ledger user=alice password='q@%x-tailD'", "tailD", 1),
    ]

    @Test(arguments: awkwardPasswords)
    func aPasswordWithPercentOrAtNeverReachesTheLog(uri: String, secretPart: String, status: Int32) async throws {
        let result = try await CLIProcess.run(["migrate", "--log-format", "json"], environment: ["DATABASE_URL": uri])
        #expect(result.status == status, "\(result.stderr)")
        #expect(!result.stderr.contains(secretPart) && !result.stdout.contains(secretPart), "\(result.stderr)")
        #expect(result.stderr.contains(status == 2 ? "percent-encode" : "connection refused"), "\(result.stderr)")
    }
}
