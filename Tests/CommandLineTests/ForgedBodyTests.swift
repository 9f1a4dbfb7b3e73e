import AppStoreModels
import AppleSimulator
import Foundation
import Jobs
import Postgres
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// A forged body as an attacker would POST it to the app's webhook (docs/guarantees.md, "Verify
/// before reading"): garbage in `x5c`, no valid signature, and numbers that once trapped
/// (`quantity` and `data.status` of -2^63). Stored beside legitimate notifications, it is
/// stored with them, rejected for its chain, and stops nothing: every run completes.
@Suite struct ForgedBodyTests {
    static let minInt64 = "-9223372036854775808"

    /// A compact JWS whose `x5c` is garbage and whose signature is none.
    static func forgedJWS(_ payload: String) -> String {
        Base64URL.encode(Array(#"{"alg":"ES256","x5c":["MIIB","not base64!","AAAA"]}"#.utf8)) + "."
            + Base64URL.encode(Array(payload.utf8)) + "." + Base64URL.encode([UInt8](repeating: 1, count: 64))
    }

    /// The body of the report: a refund of transaction `original` whose transaction says quantity -2^63.
    static func forgedBody(original: String) -> String {
        let transaction = forgedJWS("""
            {"transactionId":"\(original)","originalTransactionId":"\(original)","productId":"coins.100","bundleId":"com.example.app",\
            "environment":"Production","quantity":\(minInt64),"price":"lots","purchaseDate":"yesterday","signedDate":1700000000000}
            """)
        let payload = """
            {"notificationType":"REFUND","notificationUUID":"forged-\(UUID().uuidString)","signedDate":1700000000000,\
            "data":{"bundleId":"com.example.app","environment":"Production","appAppleId":1234,"status":\(minInt64),\
            "signedTransactionInfo":"\(transaction)"}}
            """
        return #"{"signedPayload":"\#(forgedJWS(payload))"}"#
    }

    static func environment(_ world: RunWorld) -> [String: String] {
        var environment = RunWorld.environment(world)
        environment["APPSTORE_BUNDLE_ID"] = "com.example.app"
        environment["APPSTORE_APP_APPLE_ID"] = String(V2Notifications.appAppleId)
        return environment
    }

    /// The batch of the report: two ordinary bodies and the forged one, in one input. Every body is
    /// stored, the forged one included (it is rejected later, when verified).
    @Test func ingestionStoresEveryBodyOfABatchHoldingAForgedOne() async throws {
        try await RunWorld.with("forged-ingest") { world in
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let v1 = String(decoding: try Fixtures.bytes("notifications/" + (try Fixtures.files(in: "notifications").first { $0.hasSuffix(".json") } ?? "")), as: UTF8.self)
                .replacingOccurrences(of: "\n", with: " ")
            let v2 = try V2Notifications.body("TEST")
            let input = world.reportRoot.appending(path: "batch.jsonl")
            try [v1, Self.forgedBody(original: "91"), v2].joined(separator: "\n").write(to: input, atomically: true, encoding: .utf8)
            let result = try await CLIProcess.run(["ingest-notifications", input.path], environment: ["DATABASE_URL": world.database.connectionString])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("Stored 3 notification(s)."), "\(result.stdout)")
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 3)
            // The forged body's UUID was read as text, for storing it once: stored again, it is not stored twice.
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE notification_uuid LIKE 'forged-%'") == 1)
        }
    }

    /// The forged body beside a valid refund, through three nightly runs of the executable: each
    /// completes, the refund is applied, the forged body is rejected for its chain and nothing is
    /// quarantined (nothing died); `backfill --retry-rejected` examines it again, and it is rejected again. `inspect` on it exits 1 and names the failed check.
    @Test func aForgedBodyBesideAValidOneStopsNoRun() async throws {
        try await RunWorld.with("forged-run") { world in
            try await V2Notifications.gamer(world)
            let refund = try V2Notifications.body(
                "REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: world.nowMs - 3_600_000))
            let forged = Self.forgedBody(original: "91")
            #expect(try await V2Notifications.ingest(world, [forged, refund]) == 2)
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let root = world.reportRoot.appending(path: "root.der")
            try Data(V2Notifications.chain.root).write(to: root)
            for night in 1...3 {
                let result = try await CLIProcess.run(
                    ["run", "--apple-root-certificate", root.path, "--report-dir", world.reportRoot.appending(path: "night-\(night)").path],
                    environment: Self.environment(world))
                #expect(result.status == 0, "night \(night): \(result.stderr.suffix(800))")
            }
            let rows = try await world.connection.query("SELECT outcome, reason, quarantined_at IS NOT NULL AS quarantined FROM iap.notifications ORDER BY id")
            #expect(rows.count == 2)
            #expect(try rows[0].decode("outcome", as: String?.self) == "rejected")
            #expect(try rows[0].decode("reason", as: String?.self)?.hasPrefix("jws_invalid: chain") == true)
            #expect(try rows[1].decode("outcome", as: String?.self) == "applied")
            #expect(try rows.allSatisfy { try !$0.decode("quarantined", as: Bool.self) })
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE transaction_id = '91' AND cancellation_date IS NOT NULL") == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.reconciliation_runs WHERE status = 'completed'") == 3)

            // `backfill --retry-rejected` examines it again on demand: rejected again, the refund left as it was.
            let retried = try await CLIProcess.run(
                ["backfill", "--retry-rejected", "--apple-root-certificate", root.path, "--report-dir", world.reportRoot.appending(path: "retry").path],
                environment: Self.environment(world))
            #expect(retried.status == 0, "\(retried.stderr.suffix(800))")
            #expect(retried.stdout.contains("rejected notifications examined again: 1"), "\(retried.stdout)")
            let again = try await world.connection.query("SELECT outcome, reason, run_id FROM iap.notifications ORDER BY id")
            #expect(try again[0].decode("outcome", as: String?.self) == "rejected" && again[0].decode("run_id", as: Int64?.self) == 4)
            #expect(try again[1].decode("outcome", as: String?.self) == "applied")
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE transaction_id = '91' AND cancellation_date IS NOT NULL") == 1)

            let file = world.reportRoot.appending(path: "forged.json")
            try forged.write(to: file, atomically: true, encoding: .utf8)
            let inspected = try await CLIProcess.run(
                ["inspect", "--apple-root-certificate", root.path, file.path], environment: Self.environment(world))
            #expect(inspected.status == 1, "\(inspected.stderr)")
            #expect(inspected.stdout.contains("FAIL  chain"), "\(inspected.stdout)")
            #expect(inspected.stdout.contains("payload, not verified"), "\(inspected.stdout)")
            #expect(!inspected.stdout.contains("pass  payload"))
        }
    }

    /// A sample of the boundary sweep through one run: verifyReceipt answers holding a boundary
    /// value in one field each, and V2 notifications whose signed transaction holds one, signed
    /// by the trusted chain or by one the run does not trust. The run completes, every account is
    /// written back with an outcome, every notification gets one, and nothing is quarantined.
    @Test func aSampleOfTheBoundarySweepGoesThroughOneRun() async throws {
        let answers = BoundarySweep.verifyReceiptAnswer.variants.enumerated().filter { $0.offset % 97 == 5 }.map(\.element)
        let transactions = BoundarySweep.signedTransaction.variants.enumerated().filter { $0.offset % 37 == 3 }.map(\.element)
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-sweep-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var scenario: [String: Any] = [:]
        var accounts: [(String, String)] = []
        for (index, variant) in answers.enumerated() {
            // Ids of their own, so that accounts do not share ledger rows.
            let body = variant.json.replacingOccurrences(of: "10000000000000", with: "3\(index)0000000")
            let file = directory.appending(path: "\(index).json")
            try Data(body.utf8).write(to: file)
            let blob = Data("sweep-answer-\(index)".utf8).base64EncodedString()
            scenario[blob] = ["response_file": file.path]
            accounts.append(("sweep-\(index) \(variant.label)", blob))
        }
        try await RunWorld.with("sweep-run", scenario: ["receipts": scenario]) { world in
            for (account, blob) in accounts {
                try await world.connection.execute("INSERT INTO iap.app_receipts (account_id, latest_receipt) VALUES (\(account), \(blob))")
            }
            // The signed transactions' chain is in the ledger of an account, so that a notification that verifies matches it.
            try await world.addReceipt("signed-owner", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "80"]]]])
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, environment)
                VALUES ('2000000000000001', 'signed-owner', '2000000000000001', 'pro.monthly', now() - interval '30 days', 'Sandbox')
                """)
            var bodies: [String] = []
            for (index, variant) in transactions.enumerated() {
                let chain = index % 3 == 2 ? SignedBoundarySweepChains.untrusted : V2Notifications.chain
                let renewal = try chain.sign(Array(BoundarySweep.signedRenewalInfo.root.json.utf8))
                let notification = BoundarySweep.notificationV2(
                    signedTransactionInfo: try chain.sign(Array(variant.json.utf8)), signedRenewalInfo: renewal
                ).root.json.replacingOccurrences(of: "0b4d1a9e-1f1e-4f3e-9d51-6f0c6a1d2e3f", with: "sweep-\(index)")
                bodies.append(#"{"signedPayload":"\#(try chain.sign(Array(notification.utf8)))"}"#)
            }
            #expect(try await V2Notifications.ingest(world, bodies) == bodies.count)
            let (summary, ending) = try await world.run(V2Notifications.options(world))
            #expect(ending == .completed, "\(summary.error ?? "")")
            #expect(summary.accountsProcessed == accounts.count + 1)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome IS NULL") == 0)
            // Both ways through: answers that verified wrote the ledger, others were refused by name.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'verified'") > 0)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome <> 'verified'") > 0)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE outcome IS NULL OR quarantined_at IS NOT NULL") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE outcome = 'applied'") > 0)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE reason LIKE 'jws_invalid: chain%'") >= transactions.count / 3)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE reason LIKE 'jws_invalid: payload%'") > 0)
        }
    }
}

/// A chain no run trusts, to sign forged data with.
enum SignedBoundarySweepChains {
    static let untrusted = try! SigningChain.create()
}
