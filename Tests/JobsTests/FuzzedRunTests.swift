import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import TestSupport
import Testing
@testable import WorldSupport

/// The decoder fuzzers' inputs, carried on through the database write path: mutated real answers
/// (served by the simulator) and mutated real receipts (decoded locally) go through a whole run,
/// and every value that decodes is written or refused by name, never a failed batch or a trap.
@Suite struct FuzzedRunTests {
    @Test func aRunOverMutatedAnswersAndReceiptsWritesEveryAccount() async throws {
        let seed = FuzzSeed("aRunOverMutatedAnswersAndReceiptsWritesEveryAccount")
        var generator = seed.generator
        let answers = try Fixtures.files(in: "verify-responses").map { try Fixtures.bytes("verify-responses/\($0)") }
        let receipts = try ["tpinappreceipt-receipt-production.b64", "revenuecat-base64encodedreceiptsample1.b64"].map {
            Array(Data(base64Encoded: String(decoding: try Fixtures.bytes("receipts/\($0)"), as: UTF8.self).filter { !$0.isWhitespace })!)
        }
        let answerFile = TestPaths.fixtures.appending(path: "verify-responses/revenuecat-verifyReceiptSample1.json").path
        let tokens = ["\"", "{", "}", "[", "]", ",", ":", "null", "true", "1e999", "-0", "\"\\u0000\"", "9223372036854775808",
                      "\"2147483648\"", "\"\\ud800\"", "\"=HYPERLINK(1)\"", "\"_ms\""]
        let bodies = FileManager.default.temporaryDirectory.appending(path: "rr-fuzzed-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: bodies, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: bodies) }
        var scenario: [String: Any] = [:]
        var accounts: [(String, String)] = []
        for index in 0..<120 {
            let body = Mutation.json(answers[index % answers.count], edits: 1...2, longestCut: 8, truncates: false, tokens: tokens,
                                     using: &generator)
            let blob = Data("fuzzed-answer-\(index)".utf8).base64EncodedString()
            // Served as Apple's body byte for byte: what does not parse is a garbage answer.
            let file = bodies.appending(path: "\(index).json")
            try Data(body).write(to: file)
            scenario[blob] = ["response_file": file.path]
            accounts.append(("answer-\(index)", blob))
        }
        for index in 0..<40 {
            let blob = Data(Mutation.binary(receipts[index % receipts.count], edits: 1...3, using: &generator)).base64EncodedString()
            scenario[blob] = ["response_file": answerFile]
            accounts.append(("receipt-\(index)", blob))
        }
        try await RunWorld.with("fuzzedrun", scenario: ["receipts": scenario]) { world in
            for (account, blob) in accounts {
                try await world.connection.execute("INSERT INTO iap.app_receipts (account_id, latest_receipt) VALUES (\(account), \(blob))")
            }
            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed, "\(summary.error ?? ""); \(seed)")
            #expect(summary.accountsProcessed == accounts.count, "\(seed)")
            // Every row was written back by this run, whatever its answer held.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_run_id IS NULL OR last_outcome IS NULL") == 0,
                    "\(seed)")
            // Both ways through the write path were taken: answers that verified wrote the
            // ledger, mutated receipts that still decoded wrote their local decode.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'verified'") > 20, "\(seed)")
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome <> 'verified'") > 0, "\(seed)")
            #expect(try await world.count("SELECT count(*) FROM iap.transactions") > 0, "\(seed)")
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE receipt_bundle_id IS NOT NULL") > 0, "\(seed)")
        }
    }
}
