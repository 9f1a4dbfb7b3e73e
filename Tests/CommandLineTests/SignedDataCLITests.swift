import AppleSimulator
import Foundation
import Testing
import TestSupport
@testable import WorldSupport

/// `inspect` and `ingest-notifications` on signed data, run as the real executable.
@Suite struct SignedDataCLITests {
    static func fixture(_ path: String) -> String {
        TestPaths.fixtures.appending(path: "asapi/" + path).path
    }

    /// The environment of a shell that configured nothing of the app.
    static let bare = ["APPSTORE_BUNDLE_ID": "", "APPLE_BUNDLE_ID": "", "APPSTORE_APP_APPLE_ID": ""]

    @Test func inspectShowsEveryCheckOfARealNotificationAndItsSignedParts() async throws {
        let result = try await CLIProcess.run(
            ["inspect", "--bundle-id", "com.audaos.audarecorder", Self.fixture("real/gopay-notificationV2Body-DID_RENEW-sandbox.json")],
            environment: Self.bare)
        #expect(result.status == 0)
        #expect(result.stdout.components(separatedBy: "pass  signature").count - 1 == 3)  // payload, transaction, renewal info
        #expect(result.stdout.contains("transactionId                2000000004047119"))
        #expect(result.stdout.contains("validity     every certificate valid at the transaction's signedDate 2022-03-04T09:43:28.254Z"))
        #expect(result.stdout.hasSuffix("Every check passed.\n"))
    }

    @Test func inspectJSONNamesEachCheckAndExitsOneWhenOneFails() async throws {
        let result = try await CLIProcess.run(
            ["inspect", "--json", "--bundle-id", "com.example", Self.fixture("real/negative/mimo-real-chain-header-rewritten-alg-HS256.txt")],
            environment: Self.bare)
        #expect(result.status == 1)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(document["passed"] as? Bool == false)
        let checks = try #require(((document["parts"] as? [[String: Any]])?.first?["checks"]) as? [[String: Any]])
        #expect(checks.map { $0["name"] as? String } == ["format", "algorithm", "chain", "oid", "validity", "signature", "payload", "bundle", "app_apple_id", "environment"])
        let failed = checks.filter { $0["passed"] as? Bool == false && $0["checked"] as? Bool == true }.compactMap { $0["name"] as? String }
        #expect(failed == ["algorithm", "signature"])
        // Nothing of an unverified payload is read: its claims are not checked, its fields not shown.
        let skipped = checks.filter { $0["checked"] as? Bool == false }.compactMap { $0["name"] as? String }
        #expect(skipped == ["payload", "bundle", "app_apple_id", "environment"])
        let part = try #require((document["parts"] as? [[String: Any]])?.first)
        #expect(part["fields"] is NSNull)
        #expect((part["unverifiedPayload"] as? String)?.contains("\"notificationType\":\"TEST\"") == true)
    }

    @Test func inspectUsesTheRunsConfiguration() async throws {
        let vector = Self.fixture("apple-lib/swift/mock_signed_data/testNotification")
        // Apple's test vector: its root must be given; the bundle id comes from the environment.
        let trusted = try await CLIProcess.run(
            ["inspect", "--apple-root-certificate", Self.fixture("apple-lib/swift/certs/testCA.der"), vector],
            environment: ["APPSTORE_BUNDLE_ID": "com.example", "APPLE_BUNDLE_ID": ""])
        #expect(trusted.status == 0)
        let builtIn = try await CLIProcess.run(["inspect", vector], environment: ["APPSTORE_BUNDLE_ID": "com.example", "APPLE_BUNDLE_ID": ""])
        #expect(builtIn.status == 1)
        #expect(builtIn.stdout.contains("FAIL  chain"))
        let noBundle = try await CLIProcess.run(
            ["inspect", "--apple-root-certificate", Self.fixture("apple-lib/java-certs/testCA.pem"), vector], environment: Self.bare)
        #expect(noBundle.status == 1)
        #expect(noBundle.stdout.contains("FAIL  bundle       no bundle id is configured"))
        let notACertificate = try await CLIProcess.run(
            ["inspect", "--apple-root-certificate", Self.fixture("PROVENANCE.md"), vector], environment: Self.bare)
        #expect(notACertificate.status == 2)
        #expect(notACertificate.stderr.contains("trusted root 1 is not a DER X.509 certificate"))
    }

    /// Signed data with no signedDate fails validity on the inspect path too, with the reason said,
    /// while the chain and the signature pass (issue 29).
    @Test func inspectFailsValidityWithoutASignedDate() async throws {
        let chain = try SigningChain.create()
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-undated-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = directory.appending(path: "root.der")
        try Data(chain.root).write(to: root)
        let notification = try SignedNotifications(chain: chain).body(forSpec: Array(
            #"{"notificationType":"TEST","signedDate":null,"data":{"bundleId":"com.example.app","environment":"Sandbox"}}"#.utf8))
        let transaction = try chain.sign(Array(#"""
            {"transactionId":"1","originalTransactionId":"1","productId":"coins.100","bundleId":"com.example.app","environment":"Sandbox","purchaseDate":1700000000000}
            """#.utf8))
        for (name, input) in [("notification.json", notification), ("transaction.jws", transaction)] {
            let file = directory.appending(path: name)
            try input.write(to: file, atomically: true, encoding: .utf8)
            let result = try await CLIProcess.run(
                ["inspect", "--apple-root-certificate", root.path, "--bundle-id", "com.example.app", file.path], environment: Self.bare)
            #expect(result.status == 1, "\(name): \(result.stdout)")
            #expect(result.stdout.contains("FAIL  validity     no signedDate"), "\(name): \(result.stdout)")
            #expect(result.stdout.contains("pass  chain") && result.stdout.contains("pass  signature"), "\(name): \(result.stdout)")
            #expect(result.stdout.hasSuffix("A check failed: a run would not use this data.\n"))
        }
    }

    @Test func ingestingTheSameV2BodyTwiceStoresItOnce() async throws {
        try await RunWorld.with("ingest-v2") { world in
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let chain = try SigningChain.create()
            let body = try SignedNotifications(chain: chain).body(forSpec: Array(#"{"notificationType":"TEST","data":{"bundleId":"com.example.app","environment":"Sandbox"}}"#.utf8))
            let input = world.reportRoot.appending(path: "v2.jsonl")
            try [body, body].joined(separator: "\n").write(to: input, atomically: true, encoding: .utf8)
            let environment = ["DATABASE_URL": world.database.connectionString]
            let first = try await CLIProcess.run(["ingest-notifications", input.path], environment: environment)
            #expect(first.status == 0)
            #expect(first.stdout.contains("Stored 1 notification(s). 1 already stored, not stored again."))
            let again = try await CLIProcess.run(["ingest-notifications", input.path], environment: environment)
            #expect(again.status == 0)
            #expect(again.stdout.contains("Stored 0 notification(s). 2 already stored"))
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE notification_uuid IS NOT NULL") == 1)
        }
    }
}

/// `inspect` on dates no Apple can send (issue 32): in signed transactions, renewal infos and
/// notifications, validly signed or forged, each is a failed check and exit 1, never a trap.
@Suite struct HostileDateInspectTests {
    static let values = [
        "9223372036854775807", "-9223372036854775808", "9000000000000000000", "253402300800000", "-62135596800001", "-1",
        "1e300", "-1e300", "1.5e15", "\"9223372036854775808\"",
    ]
    static let transaction = #""transactionId":"1","originalTransactionId":"1","productId":"coins.100","bundleId":"com.example.app","environment":"Sandbox","purchaseDate":1700000000000,"signedDate":1700000000000"#
    static let renewal = #""originalTransactionId":"1","productId":"pro","autoRenewProductId":"pro","environment":"Sandbox","autoRenewStatus":1,"signedDate":1700000000000"#

    /// `fields` with `name` set to `value` (replaced where present, else added).
    static func payload(_ fields: String, _ name: String, _ value: String) -> String {
        let pattern = "\"\(name)\":1700000000000"
        return "{" + (fields.contains(pattern) ? fields.replacingOccurrences(of: pattern, with: "\"\(name)\":\(value)") : fields + ",\"\(name)\":\(value)") + "}"
    }

    /// Off under the thread sanitizer: 200 sanitized process starts made it that run's longest test
    /// (13 minutes of a 2-core machine), and it races nothing (one parse a process). The plain run
    /// and the inspect fuzzers cover it.
    @Test(.disabled(if: isSanitizedRun, "200 sanitized processes, no concurrency to check")) func noDateTrapsInspect() async throws {
        let chain = try SigningChain.create()
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-hostile-dates-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = directory.appending(path: "root.der")
        try Data(chain.root).write(to: root)
        var inputs: [(name: String, text: String)] = []
        for value in Self.values {
            for fault in [nil, SigningChain.Fault.tamperedPayload] {
                let tag = "\(value)-\(fault?.rawValue ?? "signed")"
                for field in ["purchaseDate", "originalPurchaseDate", "expiresDate", "signedDate", "revocationDate"] {
                    inputs.append(("transaction-\(field)-\(tag)", try chain.sign(Array(Self.payload(Self.transaction, field, value).utf8), fault: fault)))
                }
                for field in ["gracePeriodExpiresDate", "renewalDate", "recentSubscriptionStartDate", "signedDate"] {
                    inputs.append(("renewal-\(field)-\(tag)", try chain.sign(Array(Self.payload(Self.renewal, field, value).utf8), fault: fault)))
                }
                let signedTransaction = try chain.sign(Array(Self.payload(Self.transaction, "expiresDate", value).utf8))
                let notification = #"{"notificationType":"DID_RENEW","notificationUUID":"u","signedDate":\#(value),"data":{"bundleId":"com.example.app","environment":"Sandbox","signedTransactionInfo":"\#(signedTransaction)"}}"#
                inputs.append(("notification-\(tag)", #"{"signedPayload":"\#(try chain.sign(Array(notification.utf8), fault: fault))"}"#))
            }
        }
        // 200 processes, four at a time: one after another they were the suite's longest test,
        // and under the thread sanitizer its last minutes ran on one core.
        let lanes = 4
        let failures = try await withThrowingTaskGroup(of: [String].self) { group in
            for lane in 0..<lanes {
                let mine = inputs.enumerated().filter { $0.offset % lanes == lane }.map { (index: $0.offset, name: $0.element.name, text: $0.element.text) }
                group.addTask {
                    var failures: [String] = []
                    for input in mine {
                        let file = directory.appending(path: "input-\(input.index)")
                        try input.text.write(to: file, atomically: true, encoding: .utf8)
                        let result = try await CLIProcess.run(
                            ["inspect", "--apple-root-certificate", root.path, "--bundle-id", "com.example.app", file.path],
                            environment: SignedDataCLITests.bare)
                        if result.status != 1 || !result.stdout.contains("FAIL") || result.stderr.contains("Fatal error") {
                            failures.append("\(input.name): exit \(result.status) \(result.stderr.suffix(300))")
                        }
                    }
                    return failures
                }
            }
            return try await group.reduce(into: [String]()) { $0 += $1 }
        }
        #expect(inputs.count == 200)
        #expect(failures.isEmpty, "\(failures.prefix(5))")
    }
}
