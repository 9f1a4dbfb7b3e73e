import Foundation
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// The rails end to end (docs/guarantees.md, "Safety limit"): the executable against the
/// simulator, as cron runs it, exit status and all.
@Suite struct RailsEndToEndTests {
    static func run(_ world: RunWorld, _ extra: [String] = []) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await CLIProcess.run(["run", "--max-attempts", "1", "--report-dir", world.reportRoot.appending(path: UUID().uuidString).path] + extra,
                                 environment: RunWorld.environment(world))
    }

    /// An outage: Apple answers 503 to 50 of 150 accounts; of the 100 it answers, 15 are refunded.
    /// 15 % of the verified would lose access: exit 3, nothing applied (divided by the 150 the run
    /// processed it was 10 %, and applied).
    @Test func anOutageMakesTheRailStricterNeverWeaker() async throws {
        try await RunWorld.with("rails-outage") { world in
            try await world.populateNight(total: 150, refunded: { $0 % 3 != 0 && $0 < 45 && $0 % 2 == 0 }, unanswered: { $0 % 3 == 0 })
            let refunded = (0..<150).filter { $0 % 3 != 0 && $0 < 45 && $0 % 2 == 0 }.count
            #expect(refunded == 15)
            let before = try await world.entitlements()
            let result = try await Self.run(world)
            #expect(result.status == 3, "\(result.stdout)\(result.stderr)")
            #expect((result.stdout + result.stderr).contains("15 of 100 verified accounts"), "\(result.stdout)\(result.stderr)")
            #expect(try await world.entitlements() == before)
        }
    }

    /// Four shards run as cron runs them, one after another, over a night of 300 accounts that
    /// aborts unsharded: each shard (75 accounts, under the minimum alone) exits 3 too.
    @Test func fourShardsAbortAsTheirNightDoes() async throws {
        try await RunWorld.with("rails-shards") { world in
            try await world.populateNight(total: 300, refunded: { $0 % 5 == 0 })
            let before = try await world.entitlements()
            for index in 0..<4 {
                let result = try await Self.run(world, ["--shard", "\(index)/4"])
                #expect(result.status == 3, "shard \(index): \(result.stdout)\(result.stderr)")
            }
            #expect(try await world.entitlements() == before)
        }
    }
}
