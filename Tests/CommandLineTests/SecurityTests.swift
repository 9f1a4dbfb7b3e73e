import AppStore
import AppStoreModels
import Foundation
import Postgres
import TestSupport
import Testing
@testable import WorldSupport

/// Secrets stay secret, SQL stays bound, TLS stays verified.
@Suite struct SecurityTests {
    /// Every Apple URL, pointed at a loopback HTTPS server whose certificate no system root
    /// vouches for, is refused at the handshake: each receipt or account fails with a TLS error,
    /// and nothing is verified. Run as a user runs it, for each of the four variables.
    @Test(arguments: ["APPLE_PRODUCTION_URL", "APPLE_SANDBOX_URL", "APPSTORE_API_URL", "APPSTORE_SANDBOX_API_URL"])
    func everyAppleURLRefusesACertificateNobodyVouchesFor(_ variable: String) async throws {
        let server = try TLSServerProcess()
        defer { server.stop() }
        try await APIWorld.withAPIWorld("tls", environment: variable.contains("SANDBOX") ? "Sandbox" : "Production") { world, key in
            var environment = APIWorld.environment(world, key: key)
            environment[variable] = "https://127.0.0.1:\(server.port)" + (variable.hasPrefix("APPLE_") ? "/verifyReceipt" : "")
            let source = variable.hasPrefix("APPLE_") ? "verify-receipt" : "server-api"
            let result = try await CLIProcess.run(
                ["run", "--source", source, "--max-attempts", "1", "--apple-root-certificate",
                 world.simulator.signingDirectory.appending(path: "root.der").path, "--report-dir", world.reportRoot.appending(path: "tls").path],
                environment: environment)
            #expect(result.status == 0, "\(result.stderr.suffix(1000))")
            let failures = try String(contentsOf: world.reportRoot.appending(path: "tls/failures.csv"), encoding: .utf8)
            let refused = failures.components(separatedBy: "\r\n").filter { $0.contains("HTTP tls:") }
            #expect(refused.count == 5, "\(variable): \(failures)")
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'verified'") == 0)
        }
    }

    /// The App Store Connect key and every token made from it appear in no log line (at
    /// `--log-level trace`, text and JSON), report or output of a run that spoke to the API. A
    /// token is found by its header (`"kid":"KEY"`), whatever its signature.
    @Test func theKeyAndItsTokensNeverReachLogsOrReports() async throws {
        try await APIWorld.withAPIWorld("jwt") { world, key in
            let environment = APIWorld.environment(world, key: key)
            var everything = ""
            for format in ["text", "json"] {
                let report = world.reportRoot.appending(path: "report-\(format)")
                let result = try await CLIProcess.run(
                    ["backfill", "--all", "--source", "server-api", "--log-level", "trace", "--log-format", format,
                     "--apple-root-certificate", world.simulator.signingDirectory.appending(path: "root.der").path, "--report-dir", report.path],
                    environment: environment)
                #expect(result.status == 0, "\(result.stderr.suffix(1000))")
                everything += result.stdout + result.stderr
                for file in try FileManager.default.contentsOfDirectory(atPath: report.path) {
                    everything += try String(contentsOf: report.appending(path: file), encoding: .utf8)
                }
            }
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE source = 'server_api'") == 5)  // the API spoke
            #expect(everything.contains("apple.") || everything.contains("run.started"), "the logs were captured")
            let pem = try String(contentsOf: key, encoding: .utf8)
            for line in pem.split(separator: "\n") where !line.hasPrefix("-----") && line.count >= 16 {
                #expect(!everything.contains(line), "a line of the key reached the output")
            }
            for match in everything.matches(of: /eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/) {
                let decoded = Base64URL.decode(Array(match.0.split(separator: ".")[0].utf8)).map { String(decoding: $0, as: UTF8.self) } ?? ""
                #expect(!decoded.contains("\"kid\":\"KEY\""), "a token made from the key reached the output: \(decoded)")
            }
            // The tokens do exist, and look like that: one made as the run makes them is found by the same test.
            let bearer = try ServerAPIToken(credentials: ServerAPICredentials(
                issuerId: "issuer", keyId: "KEY", bundleId: "com.example.app", privateKeyPEM: pem)).authorization(now: Date())
            let token = String(bearer.dropFirst("Bearer ".count))
            #expect(token.wholeMatch(of: /eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/) != nil)
            let header = try #require(Base64URL.decode(Array(token.split(separator: ".")[0].utf8)))
            #expect(String(decoding: header, as: UTF8.self).contains("\"kid\":\"KEY\""))
        }
    }

    /// The shared secret and the database password appear in no log line, report, metric or output.
    @Test func secretsNeverReachLogsOrReports() async throws {
        try await RunWorld.with("secrets") { world in
            try await RunWorld.populate(world, count: 6)
            try await world.addReceipt("broken", "not base64 at all!")
            let password = "db-pa55word-\(UUID().uuidString.prefix(8))"
            // Trust authentication ignores the password, so it can sit in the URL like a real one.
            let url = world.database.connectionString + " password=\(password)"
            let report = world.reportRoot.appending(path: "secret-report")
            let metrics = world.reportRoot.appending(path: "metrics.prom")
            var environment = RunWorld.environment(world)
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
