import AppStoreModels
import Foundation
import Postgres
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// What a careless configuration or a hostile peer does to the job (issue #19, the first items):
/// a clear error or a clamped value, never a trap, an unbounded wait or a secret in clear.
@Suite struct HardeningTests {
    static let environment = ["DATABASE_URL": "host=127.0.0.1 port=1 dbname=none connect_timeout=1", "APPLE_SHARED_SECRET": "s3cret"]

    static let oddOptions: [[String]] = [
        ["--expiry-lag", "inf"], ["--expiry-lag", "nan"], ["--expiry-lag", "1e300s"], ["--stale-after", "99999d"],
        ["--notification-max-age", "-1"], ["--request-timeout", "0"], ["--request-timeout", "0ms"], ["--progress-interval", "0"],
        ["--concurrency", "0"], ["--api-budget-share", "0"], ["--api-budget-share", "1.5"], ["--api-quota", "history"],
        ["--api-quota", "nope=5"], ["--api-quota", "history.mars=5"], ["--api-quota", "history=-1"], ["--api-quota", "statuses=inf"],
        // Issue 32: a rate past what an interval in nanoseconds can hold trapped once.
        ["--rate-limit", "1e300"], ["--rate-limit", "nan"], ["--rate-limit", "inf"], ["--rate-limit", "0"],
        ["--api-quota", "history=1e300"], ["--api-quota", "statuses.sandbox=nan"], ["--api-budget-share", "nan"],
        ["--max-revoke-ratio", "nan"], ["--api-quota", ".=5"], ["--api-quota", "history.=5"], ["--shard", "/"], ["--concurrency", "99999999999999999999"], ["--batch-size", "-1"],
    ]

    @Test(arguments: oddOptions)
    func anOddNumberIsAUsageErrorNeverATrap(option: [String]) async throws {
        let result = try await CLIProcess.run(["run"] + option, environment: Self.environment)
        #expect(result.status == 2)
        #expect(result.stderr.contains("Error: "))
        #expect(!result.stderr.contains("Fatal error") && !result.stderr.contains("crashed"))
    }

    static let refusedURLs = [
        "http://example.com/verifyReceipt", "http://buy.itunes.apple.com/verifyReceipt", "ftp://127.0.0.1/x", "not a url",
        // Issue 32: hosts that only start like loopback, userinfo and spellings libcurl may read otherwise.
        "http://127.0.0.1.evil.example/verifyReceipt", "http://127.1.evil.example/verifyReceipt", "http://127.1/verifyReceipt",
        "http://localhost.evil.example/x", "http://127.0.0.1@evil.example/x", "http://evil.example@127.0.0.1/x",
        "http://user:pw@127.0.0.1/x", "http://evil.example#@127.0.0.1/x", "http://evil.example\\@127.0.0.1/x",
        "http://0x7f.0.0.1/x", "http://0x7f000001/x", "http://2130706433/x", "http://0177.0.0.1/x", "http://127.0.0.256/x",
        "http://[::ffff:127.0.0.1]/x", "http://[::2]/x", "http://[::1/x", "http://127.0.0.1%2eevil.example/x",
        "http://127.0.0.1 .evil.example/x", "HTTP://evil.example/x", "http://127.0.0.1:99999/x", "http://:80/x", "http:///x",
        "https://user@buy.itunes.apple.com/verifyReceipt", "http://[::1]evil/x", "http://10.0.0.1/x", "http://128.0.0.1/x",
    ]

    static let loopbackURLs = [
        "http://127.0.0.1:9/verifyReceipt", "http://127.255.0.9:9/x", "http://localhost:9/x", "http://LOCALHOST:9/x", "HTTP://127.0.0.1:9/x",
        "http://[::1]:9/x", "http://[0:0:0:0:0:0:0:1]:9/x", "http://127.0.0.1/x?q=1#f", "https://buy.itunes.apple.com/verifyReceipt",
    ]

    /// Every Apple URL option: the two of verifyReceipt and the two of the App Store Server API.
    static let urlVariables = ["APPLE_PRODUCTION_URL", "APPLE_SANDBOX_URL", "APPSTORE_API_URL", "APPSTORE_SANDBOX_API_URL"]

    /// The environment of a run that reaches the URL checks of both sources, then fails on the database.
    static func bothSources() throws -> [String: String] {
        var environment = environment
        environment["APPSTORE_ISSUER_ID"] = "issuer"
        environment["APPSTORE_KEY_ID"] = "key"
        environment["APPSTORE_BUNDLE_ID"] = "com.example"
        environment["APPSTORE_APP_APPLE_ID"] = "1234567890"
        environment["APPSTORE_PRIVATE_KEY_FILE"] = try Fixtures.privateKey(
            at: FileManager.default.temporaryDirectory.appending(path: "rr-hardening-\(UUID().uuidString).p8")).path
        return environment
    }

    @Test(arguments: urlVariables)
    func everyAppleURLOptionIsLoopbackOrHTTPS(variable: String) async throws {
        let base = try Self.bothSources()
        defer { try? FileManager.default.removeItem(atPath: base["APPSTORE_PRIVATE_KEY_FILE"]!) }
        try await withThrowingTaskGroup(of: (String, Int32, String).self) { group in
            for url in Self.refusedURLs + Self.loopbackURLs {
                group.addTask {
                    var environment = base
                    environment[variable] = url
                    let result = try await CLIProcess.run(["run", "--source", "both", "--log-format", "json"], environment: environment)
                    return (url, result.status, result.stderr)
                }
            }
            for try await (url, status, stderr) in group {
                if Self.refusedURLs.contains(url) {
                    #expect(status == 2, "\(variable)=\(url) was not refused: \(stderr.suffix(300))")
                    #expect(stderr.contains("URL"), "\(variable)=\(url): \(stderr.suffix(300))")
                } else {
                    // Past the URL checks: it fails on the (unreachable) database instead.
                    #expect(!stderr.contains(" URL "), "\(variable)=\(url) was refused: \(stderr.suffix(300))")
                    #expect(stderr.contains("database"), "\(variable)=\(url): \(stderr.suffix(300))")
                }
                #expect(!stderr.contains("s3cret"))
            }
        }
    }

    @Test(arguments: refusedURLs)
    func appleIsNeverAskedInClearButOnLoopback(url: String) async throws {
        var environment = Self.environment
        environment["APPLE_PRODUCTION_URL"] = url
        let result = try await CLIProcess.run(["run", "--log-format", "json"], environment: environment)
        #expect(result.status == 2)
        #expect(result.stderr.contains("production URL"))
        #expect(!result.stderr.contains("s3cret"))
    }

    @Test func loopbackHTTPIsTheSimulatorAndAllowed() async throws {
        var environment = Self.environment
        environment["APPLE_PRODUCTION_URL"] = "http://127.0.0.1:9/verifyReceipt"
        environment["APPLE_SANDBOX_URL"] = "http://localhost:9/sandbox/verifyReceipt"
        let result = try await CLIProcess.run(["run", "--log-format", "json"], environment: environment)
        // Past the URL check: it fails on the (unreachable) database instead.
        #expect(!result.stderr.contains("production URL") && !result.stderr.contains("sandbox URL"))
        #expect(result.stderr.contains("database"))
    }

    /// `--help` prints each duration's default as it would be typed (issue 29), not as a Swift value.
    @Test(arguments: [
        ("run", "--stale-after", "20h"), ("run", "--expiry-lag", "1h"), ("run", "--notification-max-age", "7d"),
        ("run", "--request-timeout", "1m"), ("run", "--progress-interval", "10s"), ("explain", "--expiry-lag", "1h"),
    ])
    func helpShowsDurationsInTheUnitsTheUserTypes(command: String, option: String, expected: String) async throws {
        let result = try await CLIProcess.run([command, "--help"], environment: [:])
        #expect(result.status == 0)
        #expect(!result.stdout.contains("TimeLength"), "\(result.stdout)")
        // ArgumentParser folds long lines: the option's help is read with white space folded, up to the next option.
        let folded = result.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        let options = try #require(folded.range(of: "OPTIONS:"))
        let start = try #require(folded.range(of: "\(option) <", range: options.upperBound..<folded.endIndex), "\(option) in \(command) --help")
        let rest = folded[start.upperBound...]
        let help = rest[..<(rest.range(of: " --")?.lowerBound ?? rest.endIndex)]
        #expect(help.contains("(default: \(expected))"), "\(help)")
    }

    /// The process holds the shared secret and the key: it never dumps core.
    @Test func noCoreDumps() async throws {
        let simulator = try SimulatorProcess()
        defer { simulator.stop() }
        let limits = try String(contentsOfFile: "/proc/\(simulator.processIdentifier)/limits", encoding: .utf8)
        let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") })
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        #expect(fields[4] == "0" && fields[5] == "0")  // soft and hard
    }
}

/// A blob past 8 MB is refused before it is read: PostgreSQL gives its size, never its bytes.
@Suite struct OversizeBlobTests {
    @Test func aHugeBlobIsRefusedUnreadAndTheRestIsVerified() async throws {
        try await RunWorld.with("oversize") { world in
            try await world.addReceipt("fine", spec: ["generate": ["subscriptions": [world.subscription(original: "70", endDays: 10)]]])
            let bytes = 9 << 20
            try await world.connection.execute("""
                INSERT INTO iap.app_receipts (account_id, bundle_id, latest_receipt) VALUES ('huge', 'com.example.app', repeat('A', \(bytes)::integer))
                """)
            let (summary, _) = try await world.run(world.options())
            #expect(summary.receipts[.invalidReceipt] == 1)
            #expect(summary.receipts[.verified] == 1)
            let failures = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "failures.csv"), encoding: .utf8)
            let line = try #require(failures.components(separatedBy: "\r\n").first { $0.hasPrefix("huge,") })
            #expect(line.contains("invalid_receipt"))
            #expect(line.contains("the receipt is \(bytes) bytes, more than the \(8 << 20) a receipt may have"))
            // The blob is left as it was: the app server owns it.
            #expect(try await world.count("SELECT octet_length(latest_receipt) FROM iap.app_receipts WHERE account_id = 'huge'") == bytes)
        }
    }
}

/// Secrets at rest (issue 32): a key or shared-secret file that group or others can read is refused
/// before anything connects, naming the file and the fix; report files never follow a symlink.
/// A file owned by root may be read by its group (PostgreSQL's rule for its key, and how
/// Kubernetes mounts a Secret for a non-root pod: root's, mode 0440); owned by anyone else, not.
@Suite struct SecretsAtRestTests {
    static let nobody: uid_t = 65_534

    @Test(arguments: [(0o644, 0), (0o640, 0), (0o440, 0), (0o604, 0), (0o620, 0), (0o600, 0), (0o400, 0),
                      (0o640, nobody), (0o440, nobody), (0o400, nobody)] as [(Int, uid_t)])
    func aSecretFileOpenToOthersIsRefusedAsSshRefusesAKey(mode: Int, owner: uid_t) async throws {
        // The owner's half needs root, to give the file away (CI runs as root: RR_REQUIRE_ROOT_TESTS).
        guard getuid() == 0 else {
            #expect(ProcessInfo.processInfo.environment["RR_REQUIRE_ROOT_TESTS"] == nil, "CI must run this as root")
            return
        }
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-secret-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let secret = directory.appending(path: "shared-secret")
        try "s3cret".write(to: secret, atomically: true, encoding: .utf8)
        let key = try Fixtures.privateKey(at: directory.appending(path: "AuthKey.p8"))
        var environment = try HardeningTests.bothSources()
        defer { try? FileManager.default.removeItem(atPath: environment["APPSTORE_PRIVATE_KEY_FILE"]!) }
        environment["APPLE_SHARED_SECRET"] = nil
        environment["APPSTORE_PRIVATE_KEY_FILE"] = key.path
        for file in [secret, key] {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: secret.path)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key.path)
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: file.path)
            #expect(chown(file.path, owner, 0) == 0)
            defer { _ = chown(file.path, 0, 0) }
            let result = try await CLIProcess.run(
                ["run", "--source", "both", "--shared-secret-file", secret.path], environment: environment)
            if mode & (owner == 0 ? 0o037 : 0o077) != 0 {
                #expect(result.status == 2, "\(file.lastPathComponent) \(String(mode, radix: 8)): \(result.stderr)")
                #expect(result.stderr.contains(file.path) && result.stderr.contains("chmod 600 \(file.path)"), "\(result.stderr)")
            } else {
                // Accepted: the run goes on to the (unreachable) database.
                #expect(!result.stderr.contains("chmod"), "\(result.stderr)")
                #expect(result.stderr.contains("database"), "\(result.stderr)")
            }
            #expect(!result.stderr.contains("s3cret") && !result.stderr.contains("PRIVATE KEY"))
        }
    }
}

