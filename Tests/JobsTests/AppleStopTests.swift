import Foundation
import Jobs
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// Apple's stops are immediate (issue 32): once the shared-secret guard trips on 21004 answers,
/// no request not yet sent leaves, also the other receipts of accounts already in flight.
@Suite struct AppleStopTests {
    /// 30 accounts of 4 receipts each, every answer 21004, 4 requests in flight at most, 50 ms an
    /// answer. The guard trips at its 20th 21004; what Apple sees after it is what was on the wire
    /// then (3 more), and those sent between the 20th answer's permit going free and the guard
    /// reading it: a few at most on a loaded machine, so the bound is twice the permits. Without
    /// the check before sending, Apple saw 84.
    @Test func the21004StopHoldsEveryRequestNotYetSent() async throws {
        try await RunWorld.with("stop-21004", scenario: ["latency_ms": 50]) { world in
            for account in 0..<30 {
                for receipt in 0..<4 {
                    try await world.addReceipt("account-\(account)", spec: [
                        "faults": [["status": 21004]], "repeat_faults": true, "receipt": "\(account)-\(receipt)",
                        "generate": ["purchases": [["product_id": "lifetime", "transaction_id": "\(account * 10 + receipt)"]]],
                    ])
                }
            }
            var options = world.options()
            options.concurrency = 4
            let (summary, ending) = try await world.run(options)
            #expect(ending == .sharedSecretRejected)
            let sent = try #require(try await world.simulator.statistics()["apple_requests"])
            #expect(sent >= 20 && sent <= 20 + 2 * options.concurrency, "\(sent) verifyReceipt requests for a stop at the 20th 21004")
            #expect(summary.appleRequests == sent)
            #expect(summary.appleStatuses["21004"] == sent)
            // Nothing was written for any account: a rejected secret is no verdict on a receipt.
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 0)
            // A receipt held back is no attempt: every receipt is due again at once, none counts one more try
            // than the requests it made.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE next_attempt_at IS NOT NULL") == 0)
            #expect(try await world.count("SELECT coalesce(sum(attempts), 0) FROM iap.app_receipts") == sent)
        }
    }
}
