import AppStoreModels
import Foundation
import Testing
import TestSupport

/// Garbage from Apple: every mutated answer decodes or throws, none crashes or hangs.
@Suite struct DecoderRobustnessTests {
    /// Iterations per run; `RR_FUZZ_ITERATIONS=100000 scripts/test --filter DecoderRobustnessTests` for a long soak.
    static var iterations: Int { Int(ProcessInfo.processInfo.environment["RR_FUZZ_ITERATIONS"] ?? "") ?? 10_000 }

    @Test func mutatedAppleAnswersAndNotificationsNeverCrash() async throws {
        let seeds = try Fixtures.files(in: "verify-responses").map { try Fixtures.bytes("verify-responses/\($0)") }
            + Fixtures.files(in: "notifications").map { try Fixtures.bytes("notifications/\($0)") }
        let iterations = Self.iterations
        let seed = FuzzSeed("mutatedAppleAnswersAndNotificationsNeverCrash")
        // CPU-bound: on a thread of its own, off the cooperative pool.
        let (decoded, rejected) = await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: Self.mutateAndDecode(seeds, iterations: iterations, seed: seed)) }
        }
        // Both outcomes happen: a fuzzer whose every input is rejected (or accepted) tests nothing.
        #expect(rejected > iterations / 10, "\(seed)")
        #expect(decoded > iterations / 100, "\(seed)")
    }

    static func mutateAndDecode(_ seeds: [[UInt8]], iterations: Int, seed: FuzzSeed) -> (Int, Int) {
        var generator = seed.generator
        let tokens = ["\"", "{", "}", "[", "]", ",", ":", "null", "true", "1e999", "-0", "\"\\u0000\"", "9223372036854775808", "\"_ms\""]
        var decoded = 0
        var rejected = 0
        for index in 0..<iterations {
            let bytes = Mutation.json(seeds[index % seeds.count], edits: 1...6, longestCut: 200, truncates: true,
                                            tokens: tokens, using: &generator)
            for decode in [{ _ = try VerifyReceiptResponse.decode(bytes) }, { _ = try ServerNotification.decode(bytes) }] {
                do {
                    try decode()
                    decoded += 1
                } catch {
                    rejected += 1
                }
            }
        }
        return (decoded, rejected)
    }

    @Test func numbersBeyond64BitsAreErrorsNotTraps() {
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(#"{"status": 1e999}"#.utf8)) }
        let huge = try? VerifyReceiptResponse.decode(Array(#"{"status": 0, "latest_receipt_info": [{"transaction_id": 99999999999999999999999, "product_id": "p", "expires_date_ms": "1e30"}]}"#.utf8))
        #expect(huge == nil || huge?.latestReceiptInfo.first?.expiresDate == nil)
    }

    /// Issue 32: a date outside 1970..9999 or a count past `Int32` is a format error that names the
    /// field, for that answer only; it never reaches the rules, a report or PostgreSQL.
    @Test(arguments: [
        (#""expires_date_ms": "9000000000000000000""#, "expires_date_ms"),
        (#""expires_date_ms": -1"#, "expires_date_ms"),
        (#""purchase_date_ms": "253402300800000""#, "purchase_date_ms"),
        (#""cancellation_date": "10000-01-01 00:00:00 Etc/GMT""#, nil),
        (#""cancellation_date": "0000-12-31 00:00:00 Etc/GMT""#, "cancellation_date"),
        (#""quantity": "4294967296""#, "out of range"),
        (#""cancellation_reason": -9223372036854775808"#, "out of range"),
    ] as [(String, String?)])
    func aNumberPastWhatAppleSendsIsAnErrorNamingItsField(field: String, named: String?) throws {
        let text = #"{"status": 0, "latest_receipt_info": [{"transaction_id": "1", "product_id": "p", \#(field)}]}"#
        if let named {
            let error = #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(text.utf8)) }
            #expect("\(error.map { "\($0)" } ?? "")".contains(named))
        } else {
            // Not a date at all (five digits of year): read as absent, as any unreadable display date.
            #expect(try VerifyReceiptResponse.decode(Array(text.utf8)).latestReceiptInfo.first?.cancellationDate == nil)
        }
    }
}
