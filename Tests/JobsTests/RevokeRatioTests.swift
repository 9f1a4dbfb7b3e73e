import AppStoreModels
import Foundation
@testable import Jobs
import Postgres
import Reconciliation
@testable import Storage
import Testing
import TestSupport
import Throttling
@testable import WorldSupport

/// The rails count what they should (docs/guarantees.md, "Safety limit"): the ratio over the
/// accounts the run verified, each once; a plan taken over applied only through a fresh plan of an
/// account verified again; the minimum over a night, never a worker; the summary's counts those
/// of the corrections table. Each test here failed on the code before its fix.
@Suite struct RevokeRatioTests {
    /// A gateway that never pauses: most of Apple's answers here fail on purpose.
    static func noStormPauses() -> StormGate { StormGate(minimumSamples: 1_000) }

    /// Rule 1: an account Apple did not answer is no evidence of health. 300 accounts stored
    /// active; Apple answers 503 to 200 of them; of the 100 it answers, 20 are refunded: 20 % of
    /// the verified would lose access, so nothing is applied (the code before divided by 300).
    @Test func theRatioIsOverTheAccountsTheRunVerified() async throws {
        try await RunWorld.with("ratio-verified") { world in
            try await world.populateNight(total: 300, refunded: { $0 % 3 == 0 && $0 < 60 }, unanswered: { $0 % 3 != 0 })
            let before = try await world.entitlements()
            let (summary, ending) = try await world.run(world.options(), stormGate: Self.noStormPauses())
            #expect(summary.accountsProcessed == 300)
            #expect(summary.accountsVerified == 100)
            #expect(summary.accountsDeferred == 200)
            #expect(ending == .aborted)
            #expect(summary.error?.contains("20 of 100 verified accounts") == true, "\(summary.error ?? "no error")")
            #expect(summary.revokeRatio == RevokeRatioCount(accounts: 100, revokedAccounts: 20))
            #expect(summary.correctionsApplied == 0)
            #expect(try await world.entitlements() == before)
        }
    }

    /// Rule 2: a plan taken over from a failed run is applied only through this run's fresh plan
    /// of an account it verified again. The failed run had planned to revoke three accounts, each
    /// verified an hour ago (not due but for the takeover): Apple does not answer `blip`, whose
    /// stored row stays as it is; it answers `renewed` with a renewal, whose fresh plan (an
    /// extension) is applied instead; `outside` is not in the backfill's selection, so its plan is
    /// dropped too, and it stays due: the next night plans it afresh (Apple now says refunded).
    @Test func aPlanTakenOverIsAppliedOnlyForAccountsVerifiedAgain() async throws {
        try await RunWorld.with("adopted-reverified") { world in
            let stored = { (account: String, original: String) in
                Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: original, state: .active,
                            expiresAt: world.expiry(endDays: 1))
            }
            try await world.addReceipt("blip", spec: ["generate": ["subscriptions": [world.subscription(original: "31", renewals: 1, endDays: 25)]],
                                                      "faults": [["http": 503]], "repeat_faults": true])
            try await world.addReceipt("renewed", spec: ["generate": ["subscriptions": [world.subscription(original: "32", renewals: 2, endDays: 25)]]])
            try await world.addReceipt("outside", spec: ["generate": ["subscriptions": [world.subscription(
                original: "33", renewals: 1, endDays: 25, extra: ["cancel": ["at_ms": world.nowMs - world.dayMs, "reason": 0]])]]])
            for (account, original) in [("blip", "31"), ("renewed", "32"), ("outside", "33")] {
                try await world.store(stored(account, original))
            }
            try await world.connection.execute("""
                UPDATE iap.app_receipts SET last_verified_at = now() - interval '1 hour', last_outcome = 'verified', last_status = 0
                """)
            let store = ReconciliationStore(connection: world.connection)
            let failed = try await store.createRun(kind: .nightly, isDryRun: false, startedAt: world.now.addingTimeInterval(-3600),
                                                   shard: nil, options: ["test": true])
            for (account, original) in [("blip", "31"), ("renewed", "32"), ("outside", "33")] {
                var after = stored(account, original)
                after.state = .refunded
                try await world.plan(runId: failed, .revoke, before: stored(account, original), after: after)
            }
            try await world.connection.execute("UPDATE iap.reconciliation_runs SET status = 'failed' WHERE id = \(failed)")
            let before = try await world.entitlements()

            let (backfill, ending) = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: ["blip", "renewed"], receiptIds: [], since: nil, until: nil, products: [], all: false)))
            #expect(ending == .completed)
            #expect(backfill.correctionsTakenOver == 3)
            #expect(backfill.accountsProcessed == 2)
            #expect(backfill.accountsVerified == 1)
            let after = try await world.entitlements()
            #expect(after["blip/pro.monthly"] == before["blip/pro.monthly"], "Apple did not answer: the stored row stays")
            #expect(after["outside/pro.monthly"] == before["outside/pro.monthly"], "not verified again: the stored row stays")
            #expect(after["renewed/pro.monthly"]?.entitled == true)
            #expect((after["renewed/pro.monthly"]?.expiresAt ?? .distantPast) > world.expiry(endDays: 20))
            #expect(try await world.corrections(run: backfill.runId) == ["blip": ["revoke"], "outside": ["revoke"], "renewed": ["extend", "revoke"]])
            #expect(try await world.count("""
                SELECT count(*) FROM iap.corrections WHERE run_id = \(backfill.runId) AND planned_by_run_id = \(failed) AND status = 'superseded'
                """) == 3)
            #expect(backfill.correctionsApplied == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE reverify_requested_at IS NOT NULL") == 2)

            // The next night: `outside` is due (the takeover's mark) and its fresh plan revokes it.
            let (night, nightEnding) = try await world.run(world.options())
            #expect(nightEnding == .completed)
            #expect(try await world.corrections(run: night.runId)["outside"] == ["revoke"])
            #expect(try await world.entitlements()["outside/pro.monthly"]?.entitled == false)
            #expect(try await world.entitlements()["blip/pro.monthly"] == before["blip/pro.monthly"])
        }
    }

    /// Rule 4: the minimum counts across every shard of a night, never per worker. 300 accounts,
    /// 20 % refunded: four shards run one after another (about 75 accounts each, under 100 alone)
    /// each abort, as the same night unsharded does; a night of 40 accounts, well under the
    /// minimum, still applies in four shards.
    @Test(arguments: [(300, 4, ReconciliationRun.Ending.aborted), (300, 1, .aborted), (40, 4, .completed)])
    func theMinimumCountsTheWholeNight(accounts: Int, shards: Int, expected: ReconciliationRun.Ending) async throws {
        try await RunWorld.with("ratio-night") { world in
            try await world.populateNight(total: accounts, refunded: { $0 % 5 == 0 })
            let before = try await world.entitlements()
            var verified = 0
            for index in 0..<shards {
                var options = world.options()
                options.pageSize = 50
                options.batchSize = 25
                if shards > 1 { options.selection.shard = Shard(index, of: shards) }
                let (summary, ending) = try await world.run(options)
                verified += summary.accountsVerified
                #expect(ending == expected, "shard \(index) of \(shards): \(summary.accountsVerified) accounts, \(summary.error ?? "")")
                if shards > 1 { #expect(summary.revokeRatio?.siblingShards == index) }
            }
            #expect(verified == accounts)
            let revoked = try await world.count("SELECT count(*) FROM iap.entitlements WHERE NOT entitled")
            #expect(revoked == (expected == .aborted ? 0 : accounts / 5))
            if expected == .aborted { #expect(try await world.entitlements() == before) }
        }
    }

    /// A backfill after an abort that verifies only the 20 accounts that would lose access (of the
    /// night's 100) continues the aborted night: judged over its 100 accounts, it aborts again,
    /// where it used to apply as a night of 20 under the minimum. Once the limit is raised it applies.
    @Test func aReRunOfAnAbortedPlansAccountsIsJudgedAsItsNight() async throws {
        try await RunWorld.with("ratio-rerun") { world in
            try await world.populateNight(total: 100, refunded: { $0 % 5 == 0 })
            let before = try await world.entitlements()
            var options = world.options()
            options.pageSize = 50
            options.batchSize = 25
            let (first, firstEnding) = try await world.run(options)
            #expect(firstEnding == .aborted && first.accountsVerified == 100)
            let refunded = (0..<100).filter { $0 % 5 == 0 }.map { String(format: "n%03d", $0) }
            var backfill = world.options(kind: .backfill, selection: .backfill(
                accounts: refunded, receiptIds: [], since: nil, until: nil, products: [], all: false))
            backfill.batchSize = 25
            let (again, againEnding) = try await world.run(backfill)
            #expect(again.accountsVerified == 20)
            #expect(againEnding == .aborted, "\(again.error ?? "")")
            #expect(again.revokeRatio?.nightAccounts == 100)
            #expect(try await world.entitlements() == before)
            options.maximumRevokeRatio = 0.25
            let (_, approvedEnding) = try await world.run(options)
            #expect(approvedEnding == .completed)
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements WHERE state = 'refunded'") == 20)
        }
    }

    /// A run stopped early (SIGTERM) saw only part of its night: 20 accounts of which 5 would lose
    /// access are judged as if the minimum were met, and nothing is applied.
    @Test func aRunStoppedEarlyIsJudgedAsIfTheMinimumWereMet() async throws {
        try await RunWorld.with("ratio-stopped", scenario: RunWorld.heldMidRun) { world in
            try await world.populateNight(total: 40, refunded: { $0 % 4 == 0 })
            let before = try await world.entitlements()
            let running = Task { try await world.run(world.slowOptions()) }
            try await world.waitForACommittedBatch()
            running.cancel()
            try await world.simulator.release()
            let (summary, ending) = try await running.value
            #expect(summary.accountsVerified < 40)
            #expect(summary.revokeRatio?.nightAccounts == 100)
            #expect(ending == .aborted, "\(summary.error ?? "")")
            #expect(try await world.entitlements() == before)
        }
    }

    /// Last night's shards are never tonight's: a sibling counts only when it started after this
    /// shard's own previous run had planned (a night's shards start together, so the previous
    /// night's started before this shard's previous run had planned).
    @Test func aShardNeverCountsTheNightBeforesSiblings() async throws {
        try await RunWorld.with("ratio-siblings") { world in
            let store = ReconciliationStore(connection: world.connection)
            let day = 86_400.0
            func run(_ shard: String, startedAgo: Double, plannedAgo: Double?, accounts: Int, revoked: Int) async throws -> Int64 {
                let id = try await store.createRun(kind: .nightly, isDryRun: false, startedAt: world.now.addingTimeInterval(-startedAgo),
                                                   shard: shard, options: ["test": true])
                if let plannedAgo {
                    try await store.recordPlanned(runId: id, accounts: accounts, revokedAccounts: revoked,
                                                  at: world.now.addingTimeInterval(-plannedAgo))
                }
                return id
            }
            // Last night: shard 0 started at 03:15:00 and planned at 03:45; shard 1 started 5 s later.
            _ = try await run("0/2", startedAgo: day, plannedAgo: day - 1_800, accounts: 75, revoked: 0)
            _ = try await run("1/2", startedAgo: day - 5, plannedAgo: day - 1_700, accounts: 75, revoked: 0)
            // And a round six hours ago (a schedule run four times a day), well within 12 hours.
            let round = 6 * 3_600.0
            _ = try await run("0/2", startedAgo: round, plannedAgo: round - 1_800, accounts: 75, revoked: 0)
            _ = try await run("1/2", startedAgo: round - 5, plannedAgo: round - 1_700, accounts: 75, revoked: 0)
            // Tonight: shard 0 judges first; its sibling has started but not planned.
            let tonight = try await run("0/2", startedAgo: 0, plannedAgo: nil, accounts: 0, revoked: 0)
            _ = try await run("1/2", startedAgo: -5, plannedAgo: nil, accounts: 0, revoked: 0)
            #expect(try await store.siblingShards(runId: tonight, shard: try #require(Shard(0, of: 2)), now: world.now).shards == 0)
            // Once tonight's sibling has planned (it started 5 s after this one), it counts.
            try await world.connection.execute("""
                UPDATE iap.reconciliation_runs SET planned_at = now(), limit_accounts = 70, limit_revoked_accounts = 14
                WHERE shard = '1/2' AND started_at > \(world.now)
                """)
            let siblings = try await store.siblingShards(runId: tonight, shard: try #require(Shard(0, of: 2)), now: world.now)
            #expect(siblings.shards == 1 && siblings.accounts == 70 && siblings.revokedAccounts == 14)
        }
    }

    /// The run's rows of `iap.corrections`: its own plan by kind, and all of them by status.
    static func correctionsTable(_ world: RunWorld, run: Int64) async throws -> (byKind: [String: Int], byStatus: [String: Int]) {
        var byKind: [String: Int] = [:]
        var byStatus: [String: Int] = [:]
        let rows = try await world.connection.query("""
            SELECT kind, status, planned_by_run_id = run_id AS own, count(*) AS n FROM iap.corrections
            WHERE run_id = \(run) GROUP BY 1, 2, 3
            """)
        for row in rows {
            let count: Int = try row.decode("n")
            if try row.decode("own", as: Bool.self) { byKind[try row.decode("kind", as: String.self), default: 0] += count }
            byStatus[try row.decode("status", as: String.self), default: 0] += count
        }
        return (byKind, byStatus)
    }

    /// Rule 6: the summary's counts are the corrections table's. A run takes over a failed run's
    /// plan (one account verified again, one Apple does not answer), grants, revokes and holds a
    /// revoke for the expiry lag: its corrections by kind, applied, superseded and still planned
    /// are what `iap.corrections` holds for it (the code before counted no superseded plan taken over).
    @Test func theSummaryAddsUpToTheCorrectionsTable() async throws {
        try await RunWorld.with("summary-adds-up") { world in
            try await SafetyRailTests.ordinaryAccount(world, "granted", original: "41")
            try await world.addReceipt("refunded", spec: ["generate": ["subscriptions": [world.subscription(
                original: "42", renewals: 1, endDays: 10, extra: ["cancel": ["at_ms": world.nowMs - world.dayMs, "reason": 0]])]]])
            try await world.addReceipt("lapsing", spec: ["generate": ["subscriptions": [world.subscription(original: "43", renewals: 1, endDays: -0.01)]]])
            try await world.addReceipt("blip", spec: ["generate": ["subscriptions": [world.subscription(original: "44", renewals: 1, endDays: 25)]],
                                                      "faults": [["http": 503]], "repeat_faults": true])
            try await world.addReceipt("renewed", spec: ["generate": ["subscriptions": [world.subscription(original: "45", renewals: 2, endDays: 25)]]])
            for (account, original) in [("refunded", "42"), ("lapsing", "43"), ("blip", "44"), ("renewed", "45")] {
                try await world.store(Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: original,
                                                  state: .active, expiresAt: world.expiry(endDays: 1)))
            }
            let store = ReconciliationStore(connection: world.connection)
            let failed = try await store.createRun(kind: .nightly, isDryRun: false, startedAt: world.now.addingTimeInterval(-3600),
                                                   shard: nil, options: ["test": true])
            for (account, original) in [("blip", "44"), ("renewed", "45")] {
                let stored = Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: original, state: .active,
                                         expiresAt: world.expiry(endDays: 1))
                var after = stored
                after.state = .expired
                try await world.plan(runId: failed, .revoke, before: stored, after: after)
            }
            try await world.connection.execute("UPDATE iap.reconciliation_runs SET status = 'failed' WHERE id = \(failed)")

            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed)
            #expect(summary.correctionsTakenOver == 2)
            #expect(summary.heldRevokes == 1)
            #expect(summary.corrections["grant"] == 1 && summary.corrections["revoke"] == 1)
            let (byKind, byStatus) = try await Self.correctionsTable(world, run: summary.runId)
            #expect(byKind == summary.corrections)
            #expect(byStatus["applied", default: 0] == summary.correctionsApplied)
            #expect(byStatus["superseded", default: 0] == summary.correctionsSuperseded)
            #expect(byStatus["planned", default: 0] == summary.correctionsPlanned)
            #expect(byStatus.values.reduce(0, +) == summary.totalCorrections + summary.correctionsTakenOver)
            #expect(summary.correctionsSuperseded == 2)
            // The same for the run's row, which `report` and explain read.
            let recorded = try await store.runSummary(runId: summary.runId)
            #expect(recorded?.correctionsSuperseded == summary.correctionsSuperseded)
            #expect(recorded?.correctionsApplied == summary.correctionsApplied)
        }
    }
}
