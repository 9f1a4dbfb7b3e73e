import Foundation
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// A first night on an empty `iap.entitlements` is refused without `--first-night`, and a first
/// night says, per product, what it takes away before it applies anything (docs/adoption.md,
/// "The first night").
@Suite(.serialized) struct FirstNightGuardTests {
    /// 20 accounts of pro.monthly, 5 of them lapsed (RunWorld.populate), and one of pro.yearly lapsed.
    static func populated(_ world: RunWorld) async throws {
        try await RunWorld.populate(world, count: 20)
        try await world.addReceipt("yearly-lapsed", spec: ["generate": ["subscriptions": [
            world.subscription(original: "880", endDays: -3, product: "pro.yearly"),
        ]]])
    }

    static func run(_ world: RunWorld, _ name: String, _ extra: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await CLIProcess.run(["run", "--stale-after", "0s", "--report-dir", world.reportRoot.appending(path: name).path] + extra,
                                 environment: RunWorld.environment(world), acceptsFirstNight: false)
    }

    @Test func aFirstNightWithNothingImportedIsRefusedBeforeAnythingIsReadOrWritten() async throws {
        try await RunWorld.with("first-night-refused") { world in
            try await Self.populated(world)
            let requestsBefore = try await world.simulator.statistics()["requests"]
            let refused = try await Self.run(world, "refused", [])
            #expect(refused.status == 2, "\(refused.stderr.suffix(1000))")
            #expect(refused.stderr.contains("run.first_night_refused") && refused.stderr.contains("--first-night")
                && refused.stderr.contains("docs/adoption.md"), "\(refused.stderr)")
            // Nothing asked of Apple, nothing written: not even the run's row.
            #expect(try await world.simulator.statistics()["requests"] == requestsBefore)
            #expect(try await world.count("SELECT count(*) FROM iap.reconciliation_runs") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_verified_at IS NOT NULL") == 0)
        }
    }

    /// The dry run is never refused, and prints the losses per product; `--first-night` prints them
    /// before applying; a later night needs no flag (and, nothing imported, lists what it takes away: nothing).
    @Test func aFirstNightPrintsWhatItTakesAwayPerProductBeforeApplying() async throws {
        try await RunWorld.with("first-night-accepted") { world in
            try await Self.populated(world)
            let expected = ["  pro.monthly  5", "  pro.yearly   1"]
            let dry = try await Self.run(world, "dry", ["--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr.suffix(1000))")
            #expect(dry.stdout.contains("First night: access this run takes away, per product (out of 21 verified accounts)"), "\(dry.stdout)")
            #expect(expected.allSatisfy(dry.stdout.contains) && dry.stdout.contains("A dry run: nothing is applied."), "\(dry.stdout)")
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 0)

            let first = try await CLIProcess.run(
                ["run", "--stale-after", "0s", "--first-night", "--max-revoke-ratio", "1", "--report-dir", world.reportRoot.appending(path: "first").path],
                environment: RunWorld.environment(world), acceptsFirstNight: false)
            #expect(first.status == 0, "\(first.stderr.suffix(1000))")
            let listed = try #require(first.stdout.range(of: "  pro.yearly   1"), "\(first.stdout)")
            let summary = try #require(first.stdout.range(of: "Run "), "\(first.stdout)")
            #expect(listed.lowerBound < summary.lowerBound && expected.allSatisfy(first.stdout.contains), "\(first.stdout)")
            #expect(first.stderr.contains("run.first_night_losses"))
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE kind = 'revoke' AND status = 'applied'") == 6)

            // Nothing of the app's was imported: the next night is a first night too, and takes nothing away.
            let next = try await Self.run(world, "next", [])
            #expect(next.status == 0 && next.stdout.contains("(none: no account loses access)"), "\(next.stdout)\(next.stderr.suffix(1000))")
        }
    }

    /// Over the limit, the losses are printed all the same and nothing is applied.
    @Test func aFirstNightOverTheLimitPrintsItsLossesAndAppliesNothing() async throws {
        try await RunWorld.with("first-night-over") { world in
            try await Self.populated(world)
            let over = try await Self.run(world, "over", ["--first-night", "--max-revoke-ratio", "0.05", "--revoke-ratio-minimum", "10"])
            #expect(over.status == 3, "\(over.stderr.suffix(1000))")
            #expect(over.stdout.contains("  pro.monthly  5") && over.stdout.contains("  pro.yearly   1"), "\(over.stdout)")
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 0)
        }
    }

    /// `explain` decides as the next run would: on a first night a lapsed account with no stored row
    /// is one the next run would revoke (and the text and JSON say it is a first night); once the
    /// app's access is imported, the same account's missing row is no loss of access.
    @Test func explainKnowsAFirstNightAsTheRunDoes() async throws {
        try await RunWorld.with("first-night-explain") { world in
            try await Self.populated(world)
            // acct-00001 lapsed four days ago (RunWorld.populate). A first night the limit aborted verified it
            // (explain decides only for a verified account) and is still no completed night.
            #expect(try await Self.run(world, "aborted", ["--first-night", "--max-revoke-ratio", "0.05", "--revoke-ratio-minimum", "10"]).status == 3)
            let environment = RunWorld.environment(world)
            let text = try await CLIProcess.run(["explain", "acct-00001"], environment: environment)
            #expect(text.status == 0 && text.stdout.contains("the next run would revoke it") && text.stdout.contains("a first night"), "\(text.stdout)")
            // explain only reads: it runs on a read-only session (a replica) as well.
            var readOnly = environment
            readOnly["PGOPTIONS"] = "-c default_transaction_read_only=on"
            let json = try await CLIProcess.run(["explain", "acct-00001", "--json"], environment: readOnly)
            let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            let decision = (object?["decisions"] as? [[String: Any]])?.first
            #expect(object?["first_night"] as? Bool == true && (decision?["next_run"] as? [String: Any])?["kind"] as? String == "revoke",
                    "\(json.stdout.prefix(1500))")
            // Once the import is recorded, the same account's missing row would be no loss.
            try await world.connection.execute("UPDATE iap.adoption SET access_imported_at = now()")
            let after = try await CLIProcess.run(["explain", "acct-00001", "--json"], environment: environment)
            let later = try JSONSerialization.jsonObject(with: Data(after.stdout.utf8)) as? [String: Any]
            let laterDecision = (later?["decisions"] as? [[String: Any]])?.first
            #expect(later?["first_night"] as? Bool == false && (laterDecision?["next_run"] as? [String: Any])?["kind"] as? String == "update",
                    "\(after.stdout.prefix(1500))")
        }
    }

    /// A first night in two shards: the second shard, run after the first completed, still counts
    /// its lapsed first rows as losses (the night is decided by who wrote the rows, not by a
    /// completed run); and an import made after an aborted first night ends the first nights.
    @Test func aShardedFirstNightCountsEveryShardAndAnImportAfterAnAbortEndsIt() async throws {
        try await RunWorld.with("first-night-shards") { world in
            try await RunWorld.populate(world, count: 40)  // 10 lapsed, spread over the two shards
            var revokes = 0
            for shard in ["0/2", "1/2"] {
                let result = try await Self.run(world, "shard-\(shard.prefix(1))", ["--first-night", "--shard", shard, "--max-revoke-ratio", "1"])
                #expect(result.status == 0 && result.stderr.contains("run.first_night"), "\(shard): \(result.stderr.suffix(800))")
                let runId = try await world.count("SELECT max(id) FROM iap.reconciliation_runs")
                let own = try await world.count("SELECT count(*) FROM iap.corrections WHERE kind = 'revoke' AND run_id = \(runId)")
                #expect(own > 0, "shard \(shard) counted none of its losses")
                revokes += own
            }
            #expect(revokes == 10)
        }
        try await RunWorld.with("first-night-import-after-abort") { world in
            try await Self.populated(world)
            let aborted = try await Self.run(world, "aborted", ["--first-night", "--max-revoke-ratio", "0.05", "--revoke-ratio-minimum", "10"])
            #expect(aborted.status == 3)
            // The adopter imports as adoption.md says, after the aborted night: two customers the app serves, and the mark.
            for account in ["acct-00010", "acct-00011"] {
                try await world.store(Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: "", state: .active,
                                                  expiresAt: world.expiry(endDays: 30)))
            }
            try await world.connection.execute("INSERT INTO iap.adoption (access_imported_at) VALUES (now()) ON CONFLICT (id) DO UPDATE SET access_imported_at = now()")
            let next = try await Self.run(world, "next", ["--max-revoke-ratio", "0.05", "--revoke-ratio-minimum", "10"])
            #expect(next.status == 0 && !next.stderr.contains("run.first_night"), "\(next.stderr.suffix(800))")
            let runId = try await world.count("SELECT max(id) FROM iap.reconciliation_runs")
            // Its own plan (the aborted night's, taken over, is retired or replaced): no first row counted as a loss.
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE kind = 'revoke' AND planned_by_run_id = \(runId)") == 0)
        }
    }

    /// With no receipt stored there is nothing to take away: the first night runs without the flag.
    @Test func aFirstNightWithNoReceiptNeedsNoFlag() async throws {
        try await RunWorld.with("first-night-empty") { world in
            let empty = try await Self.run(world, "empty", [])
            #expect(empty.status == 0, "\(empty.stderr.suffix(1000))")
            #expect(try await world.count("SELECT count(*) FROM iap.reconciliation_runs WHERE status = 'completed'") == 1)
        }
    }
}
