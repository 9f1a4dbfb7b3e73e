import AppStore
import AppStoreModels
import Foundation
import Jobs
import Reconciliation
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// Apple's budget on the App Store Server API (issue 28): the job keeps to its share of each
/// endpoint's quota, a 429 stops the endpoint for every task until Retry-After, shards together
/// keep to one budget, and history is asked once per customer. Against the simulator enforcing
/// Apple's quota over a scaled-down window, on loopback.
@Suite struct APIBudgetTests {
    static let day: Int64 = 86_400_000

    /// A subscription chain of one transaction, for the simulated API.
    static func subscription(_ id: String, product: String = "pro.monthly", customer: String? = nil, now: Int64) -> [String: Any] {
        var chain: [String: Any] = [
            "environment": "Production",
            "transactions": [["transactionId": id, "productId": product, "type": "Auto-Renewable Subscription",
                              "subscriptionGroupIdentifier": product, "purchaseDate": now - 5 * day, "expiresDate": now + 25 * day]],
            "renewal": ["autoRenewStatus": 1, "autoRenewProductId": product],
        ]
        if let customer { chain["customer"] = customer }
        return chain
    }

    static func purchase(_ id: String, product: String, customer: String? = nil, now: Int64) -> [String: Any] {
        var chain: [String: Any] = [
            "environment": "Production",
            "transactions": [["transactionId": id, "productId": product, "type": "Non-Consumable", "purchaseDate": now - 50 * day]],
        ]
        if let customer { chain["customer"] = customer }
        return chain
    }

    static func id(_ index: Int) -> String { String(7_000_000_000 + index) }

    /// `accounts` accounts with one subscription each, known to the job by their stored entitlement.
    static func subscribers(_ accounts: Int, quota: [String: Any]?, _ body: (RunWorld) async throws -> Void) async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        var chains: [String: Any] = [:]
        for index in 0..<accounts { chains[id(index)] = subscription(id(index), now: nowMs) }
        var scenario: [String: Any] = ["api": ["chains": chains]]
        if let quota { scenario["api_quota"] = quota }
        try await RunWorld.with("api-budget", now: now, scenario: scenario) { world in
            for index in 0..<accounts {
                let account = "subscriber-\(index)"
                try await world.addReceipt(account, spec: ["generate": ["subscriptions": [world.subscription(original: id(index), endDays: 25)]]])
                try await world.store(Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: id(index),
                                                  latestTransactionId: id(index), state: .active, expiresAt: Date(ms: nowMs + 25 * day),
                                                  environment: "Production"))
            }
            try await body(world)
        }
    }

    /// A server-api backfill of every account, keeping to `history` and `statuses` requests a
    /// second of Apple's quota, half of it the job's.
    static func options(_ world: RunWorld, history: Double, statuses: Double, concurrency: Int = 8) -> RunOptions {
        var options = ServerAPISourceTests.options(world)
        options.apiQuota = ServerAPIQuota(production: [.history: history, .statuses: statuses], sandbox: [:])
        options.apiBudgetShare = 0.5
        options.concurrency = concurrency
        return options
    }

    /// The job takes its share and no more: at 10 a second (half of 20), a second's burst at most,
    /// never a 429 from a quota that leaves the other half to the app server.
    @Test func theJobNeverExceedsItsShare() async throws {
        let quota: [String: Any] = ["window_seconds": 2, "production": ["history": 20, "statuses": 20]]
        try await Self.subscribers(60, quota: quota) { world in
            let (summary, ending) = try await world.run(Self.options(world, history: 20, statuses: 20), apiBudget: true)
            #expect(ending == .completed)
            #expect(summary.receipts[.verified] == 60)
            let traffic = try await world.simulator.apiStatistics()
            for endpoint in ["history/Production", "statuses/Production"] {
                let seen = try #require(traffic[endpoint], "\(endpoint)")
                // The simulator's quota is the judge, counting, not timing: 40 requests in the 2 s
                // window that opens with the first one. The job's share (10 a second, a burst of 10)
                // sends at most 30 there; the whole quota taken (20 a second, a burst of 20) would
                // send 60 and meet 429s. A loaded machine only delays requests, and the budget's
                // tokens never pile up past the burst, so no stall can crowd them.
                #expect(seen.requests == 60 && seen.throttled == 0, "\(endpoint)")
                let usage = try #require(summary.apiRequests?[ServerAPIEndpointKey(endpoint)!])
                #expect(usage.budgetPerSecond == 10 && usage.requests == 60 && usage.throttled == 0)
                #expect(usage.budgetUsed > 0 && usage.budgetUsed <= 1.3, "\(usage)")
            }
        }
    }

    /// Apple's quota runs out (the app server used it, or Apple granted less): the first 429
    /// pauses the endpoint for every task until its Retry-After. No other request reaches the
    /// endpoint meanwhile but those already on their way; the run then finishes every account.
    ///
    /// Counted in the simulator's own windows, not by wall-clock gaps: Apple lets 3 history
    /// requests through a 2-second window (windows counted from the first request), while the job
    /// believes it may send 20 a second, 4 at a time. With the pause, a window's 429s are at most
    /// the 4 that were on their way when the first came back, however slow the machine; without
    /// it, the other 5 accounts' requests keep coming every 50 ms and are refused one by one.
    @Test func a429StopsTheEndpointForEveryoneUntilRetryAfter() async throws {
        let concurrency = 4
        let quota: [String: Any] = ["window_seconds": 2, "production": ["history": 1.5, "statuses": 100]]
        try await Self.subscribers(9, quota: quota) { world in
            var options = Self.options(world, history: 40, statuses: 200, concurrency: concurrency)
            options.policy.maximumAttempts = 10
            let (summary, ending) = try await world.run(options, apiBudget: true)
            #expect(ending == .completed)
            #expect(summary.receipts[.verified] == 9, "\(summary.receipts)")
            let traffic = try await world.simulator.apiStatistics()
            let history = try #require(traffic["history/Production"])
            #expect(history.requests == 9)
            #expect(history.throttled >= 1, "the quota must have been hit for the test to mean anything")
            #expect(summary.apiRequests?[ServerAPIEndpointKey(.history, .production)]?.throttled == history.throttled)
            // The simulator's windows start at its first request, on any endpoint.
            let first = try #require(traffic.values.flatMap { $0.arrivals + $0.throttledAt }.min())
            let refusedByWindow = Dictionary(grouping: history.throttledAt) { ($0 - first) / 2_000 }
            #expect(refusedByWindow.values.allSatisfy { $0.count <= concurrency }, "429s by window: \(refusedByWindow.sorted { $0.key < $1.key })")
            // And each window let its 3 through: nothing was refused that the window still had room for.
            let admittedByWindow = Dictionary(grouping: history.arrivals) { ($0 - first) / 2_000 }
            for window in refusedByWindow.keys {
                #expect(admittedByWindow[window]?.count == 3, "window \(window): \(admittedByWindow[window] ?? [])")
            }
        }
    }

    /// Two shard workers at once: each takes half of the job's share, so together they keep to it.
    @Test func shardsTogetherStayWithinOneBudget() async throws {
        let quota: [String: Any] = ["window_seconds": 2, "production": ["history": 20, "statuses": 20]]
        try await Self.subscribers(60, quota: quota) { world in
            var first = Self.options(world, history: 20, statuses: 20)
            first.selection = AccountSelection(kind: first.selection.kind, shard: Shard(0, of: 2))
            var second = Self.options(world, history: 20, statuses: 20)
            second.selection = AccountSelection(kind: second.selection.kind, shard: Shard(1, of: 2))
            async let one = world.run(first, apiBudget: true)
            async let two = world.run(second, apiBudget: true)
            let (a, b) = try await (one, two)
            #expect(a.ending == .completed && b.ending == .completed)
            #expect(a.summary.receipts[.verified, default: 0] + b.summary.receipts[.verified, default: 0] == 60)
            // Each shard's own count: its requests over what 5 a second allowed in its time, a burst
            // of 5 on top (30 requests take at least 5 s, so at most 35/25). A slower machine only
            // lowers it; an unbudgeted shard sends its 30 in well under a second.
            for shard in [a.summary, b.summary] {
                let usage = try #require(shard.apiRequests?[ServerAPIEndpointKey(.history, .production)])
                #expect(usage.budgetPerSecond == 5)
                #expect(usage.budgetUsed > 0 && usage.budgetUsed <= 1.4, "\(usage)")
            }
            let traffic = try await world.simulator.apiStatistics()
            for endpoint in ["history/Production", "statuses/Production"] {
                let seen = try #require(traffic[endpoint])
                // Counted by the simulator's quota (40 in the first 2 s window): together 10 a second
                // and each shard's burst of 5 send at most 30 there; a budget per shard left unsplit
                // (10 a second each, bursts of 10) would send 60 and meet 429s.
                #expect(seen.requests == 60 && seen.throttled == 0, "\(endpoint)")
            }
        }
    }

    /// History answers with the customer's whole history from any of its ids: asked once per
    /// customer (twice for an account holding two Apple IDs' purchases); statuses only where the
    /// history holds a subscription. Before: both calls for every original id (12 here, now 7).
    @Test func historyIsAskedOncePerCustomerAndStatusesOnlyForSubscribers() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let chains: [String: Any] = [
            // One Apple ID: two subscriptions in two groups and a lifetime purchase.
            "81": Self.subscription("81", product: "pro.monthly", customer: "c81", now: nowMs),
            "82": Self.subscription("82", product: "storage.yearly", customer: "c81", now: nowMs),
            "83": Self.purchase("83", product: "lifetime", customer: "c81", now: nowMs),
            // One account, two Apple IDs, a subscription each.
            "91": Self.subscription("91", product: "pro.monthly", customer: "c91", now: nowMs),
            "92": Self.subscription("92", product: "storage.yearly", customer: "c92", now: nowMs),
            // A lifetime purchase alone: no subscription, no statuses.
            "99": Self.purchase("99", product: "lifetime", now: nowMs),
        ]
        try await RunWorld.with("api-per-customer", now: now, scenario: ["api": ["chains": chains]]) { world in
            let owners: [(String, String, String, Bool)] = [
                ("one-id", "81", "pro.monthly", true), ("one-id", "82", "storage.yearly", true), ("one-id", "83", "lifetime", false),
                ("two-ids", "91", "pro.monthly", true), ("two-ids", "92", "storage.yearly", true), ("lifetime", "99", "lifetime", false),
            ]
            for account in ["one-id", "two-ids", "lifetime"] {
                try await world.addReceipt(account, spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "x-\(account)"]]]])
            }
            for (account, original, product, expires) in owners {
                try await world.store(Entitlement(accountId: account, productId: product, originalTransactionId: original,
                                                  latestTransactionId: original, state: .active,
                                                  expiresAt: expires ? Date(ms: nowMs + 25 * Self.day) : nil, environment: "Production"))
            }
            let (summary, ending) = try await world.run(Self.options(world, history: 1000, statuses: 1000), apiBudget: true)
            #expect(ending == .completed)
            #expect(summary.receipts[.verified] == 3)
            #expect(summary.apiRequests?[ServerAPIEndpointKey(.history, .production)]?.requests == 4)  // one-id once, two-ids twice, lifetime once
            #expect(summary.apiRequests?[ServerAPIEndpointKey(.statuses, .production)]?.requests == 3)  // not for the lifetime-only account
            #expect(summary.appleRequests == 7)
            // Nothing was lost by asking less: every product of every chain is still entitled, renewal state included.
            let entitlements = try await world.entitlements()
            for (account, _, product, expires) in owners {
                let row = try #require(entitlements["\(account)/\(product)"], "\(account)/\(product)")
                #expect(row.state == .active, "\(account)/\(product)")
                if expires { #expect(row.autoRenew == true, "\(account)/\(product)") }
            }
            #expect(summary.corrections.isEmpty || summary.corrections["revoke"] == nil, "\(summary.corrections)")
        }
    }
}
