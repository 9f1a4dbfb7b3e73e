import AppStoreModels
import Foundation
import Postgres
import Reconciliation
@testable import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// Issue 35, events: NOTIFY after each committed batch that applied corrections, and the
/// corrections table as an outbox read by cursor (`corrections --after`), through real runs.
@Suite struct CorrectionsOutboxTests {
    /// `corrections --after N --json`, parsed: one object a line.
    static func consume(_ world: RunWorld, after cursor: Int64, limit: Int64? = nil) async throws -> [[String: Any]] {
        let result = try await CLIProcess.run(
            ["corrections", "--after", "\(cursor)", "--json"] + (limit.map { ["--limit", "\($0)"] } ?? []), environment: RunWorld.environment(world))
        #expect(result.status == 0, "\(result.stderr)")
        return try result.stdout.split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }

    static func events(_ listener: PostgresConnection) async throws -> [[String: Any]] {
        _ = try await listener.query("SELECT 1")  // takes in what the server sent meanwhile
        return try await listener.notifications().map { notification in
            #expect(notification.channel == "iap_corrections")
            #expect(notification.payload.utf8.count < 8000)
            return try #require(try JSONSerialization.jsonObject(with: Data(notification.payload.utf8)) as? [String: Any])
        }
    }

    static func int(_ value: Any?) -> Int64 { (value as? NSNumber)?.int64Value ?? -1 }

    /// A run killed while applying (its last batch waits on a row lock, the earlier ones are
    /// committed), then the run that adopts the rest. A consumer that reads between them and after
    /// sees every applied correction once, in commit order; a listener sees one event per
    /// committed batch, whose ranges are exactly those corrections.
    @Test func aConsumerByCursorAndAListenerSeeEveryAppliedCorrectionOnceAcrossAKill() async throws {
        try await RunWorld.with("outbox-kill") { world in
            try await RunWorld.populate(world, count: 40)
            // The last account already has a (stale) row: its correction updates it, and locking the
            // row holds the batch that applies it.
            try await world.store(Entitlement(
                accountId: "acct-00039", productId: "pro.monthly", originalTransactionId: "10039", state: .expired,
                expiresAt: world.expiry(endDays: -40)))
            let listener = try await world.database.connect()
            try await listener.execute("LISTEN iap_corrections")
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            try await holder.execute("SELECT 1 FROM iap.entitlements WHERE account_id = 'acct-00039' FOR UPDATE")

            let first = try CLIProcess(["run", "--batch-size", "5", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            try await waitUntil("run 1 applied some batches and waits on the held row") {
                let waiting = try await world.count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
                let applied = try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'applied'")
                return waiting >= 1 && applied > 0
            }
            let before = try await Self.consume(world, after: 0)
            first.signal(SIGKILL)
            _ = try await first.wait()
            try await holder.execute("ROLLBACK")
            await holder.close()
            let planned = try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'planned'")
            #expect(!before.isEmpty && planned > 0, "the kill must fall between two applied batches")
            let eventsBefore = try await Self.events(listener)

            let second = try await CLIProcess.run(["run", "--batch-size", "5", "--report-dir", world.reportRoot.path],
                                                  environment: RunWorld.environment(world))
            #expect(second.status == 0, "\(second.stderr)")
            let cursor = Self.int(before.last?["applied_seq"])
            let after = try await Self.consume(world, after: cursor)
            let events = eventsBefore + (try await Self.events(listener))

            // Exactly once: the two reads together are every applied correction, none twice, in order.
            let read = (before + after).map { Self.int($0["id"]) }
            let applied = try await world.connection.query("SELECT id FROM iap.corrections WHERE status = 'applied' ORDER BY id")
                .map { try $0.decode("id", as: Int64.self) }
            #expect(Set(read).count == read.count)
            #expect(Set(read) == Set(applied))
            #expect(applied.count >= 30, "most of the 40 accounts are corrected (\(applied.count))")
            let seqs = (before + after).map { Self.int($0["applied_seq"]) }
            #expect(seqs == seqs.sorted() && seqs.first == 1 && seqs.last == Int64(seqs.count))
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'planned'") == 0)
            // The held account's correction was planned by run 1 and applied by run 2, after the cursor.
            let held = try #require(after.first { $0["account_id"] as? String == "acct-00039" })
            #expect(held["kind"] as? String == "grant" && Self.int(held["run_id"]) == 2)
            #expect((held["before"] as? [String: Any])?["state"] as? String == "expired")
            #expect((held["after"] as? [String: Any])?["state"] as? String == "active")

            // One event per committed batch: run 1's before the kill, run 2's after; the ranges
            // tile the applied_seq numbers, and the counts add up by kind.
            #expect(!eventsBefore.isEmpty && eventsBefore.allSatisfy { Self.int($0["run_id"]) == 1 })
            #expect(events.count > eventsBefore.count && events[eventsBefore.count...].allSatisfy { Self.int($0["run_id"]) == 2 })
            var next: Int64 = 1
            for event in events {
                let applied = Self.int(event["applied"])
                #expect(Self.int(event["first_applied_seq"]) == next)
                #expect(Self.int(event["last_applied_seq"]) == next + applied - 1)
                #expect((event["kinds"] as? [String: Any])?.values.map { Self.int($0) }.reduce(0, +) == applied)
                #expect(applied <= 5)  // --batch-size
                next += applied
            }
            #expect(next - 1 == Int64(applied.count))
            // What docs/events.md tells a consumer of one event to run lists that batch's corrections, no other.
            if let event = events.dropFirst().first {
                let (first, count) = (Self.int(event["first_applied_seq"]), Self.int(event["applied"]))
                let listed = try await Self.consume(world, after: first - 1, limit: count)
                #expect(listed.map { Self.int($0["applied_seq"]) } == Array(first..<(first + count)))
            }
            #expect(eventsBefore.map { Self.int($0["applied"]) }.reduce(0, +) == Int64(before.count))
            await listener.close()
        }
    }

    /// Why the cursor is applied_seq and not the id: shard worker 0/2 plans first and waits on a
    /// held row while applying; worker 1/2 plans later (larger ids) and commits. A consumer reads
    /// then; worker 0's smaller ids commit after. Read by applied_seq, none is skipped, and none
    /// read twice; a cursor on the id would have skipped every one of worker 0's.
    /// Numbering waits for the outbox lock while another transaction holds it to its commit: the
    /// numbers are then in commit order, so a cursor never steps over one committed later (issue
    /// 45: replacing the lock with `SELECT 1` left every test green).
    @Test func numberingWaitsForTheOutboxLockHeldToACommit() async throws {
        try await RunWorld.with("outbox-lock") { world in
            let store = ReconciliationStore(connection: world.connection)
            let runId = try await store.createRun(kind: .nightly, isDryRun: false, startedAt: world.now, shard: nil, options: ["test": true])
            let granted = Entitlement(accountId: "late", productId: "pro.monthly", originalTransactionId: "1", state: .active,
                                      expiresAt: world.expiry(endDays: 30))
            try await world.plan(runId: runId, .grant, before: nil, after: granted)
            // Another applier's transaction, between its numbering and its commit.
            let other = try await world.database.connect()
            try await other.execute("BEGIN")
            try await other.execute("SELECT pg_advisory_xact_lock(125835821806690)")  // RunLock.outboxKey, "rroutb"
            let applier = ReconciliationStore(connection: try await world.database.connect())
            // A task, not `async let`: a test that fails while the apply waits on the held lock must
            // not wait for it at the end of its scope (a TSan run once hung there for good).
            let applying = Task { try await applier.applyPlanned(runId: runId, afterId: 0, limit: 10, now: world.now) }
            try await waitUntil("the numbering waits for the outbox lock") { try await world.someoneWaitsOnALock() }
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE applied_seq IS NOT NULL") == 0)
            try await other.execute("COMMIT")
            #expect(try await applying.value.applied == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE applied_seq IS NOT NULL") == 1)
            await other.close()
            await applier.connection.close()
        }
    }

    @Test func correctionsCommittedLateWithSmallerIdsAreNotSkipped() async throws {
        try await RunWorld.with("outbox-shards") { world in
            try await RunWorld.populate(world, count: 40)
            // A shard-0 account whose subscription is active (index % 20 >= 6), stored stale: locking its row holds worker 0.
            let held = try #require(try await world.connection.query("""
                SELECT account_id FROM iap.app_receipts
                WHERE iap.in_shard(account_id, 0, 2) AND substr(account_id, 6)::int % 20 >= 6 ORDER BY account_id LIMIT 1
                """).first?.decode("account_id", as: String.self))
            try await world.store(Entitlement(
                accountId: held, productId: "pro.monthly", originalTransactionId: "\(10_000 + Int(held.dropFirst(5))!)", state: .expired,
                expiresAt: world.expiry(endDays: -40)))
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            try await holder.execute("SELECT 1 FROM iap.entitlements WHERE account_id = \(held) FOR UPDATE")
            let environment = RunWorld.environment(world)
            let zero = try CLIProcess(["run", "--shard", "0/2", "--report-dir", world.reportRoot.path], environment: environment)
            try await waitUntil("worker 0/2 waits on the held row") {
                try await world.count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()") >= 1
            }
            let one = try await CLIProcess.run(["run", "--shard", "1/2", "--report-dir", world.reportRoot.path], environment: environment)
            #expect(one.status == 0, "\(one.stderr)")
            let early = try await Self.consume(world, after: 0)
            try await holder.execute("ROLLBACK")
            await holder.close()
            #expect(try await zero.wait().status == 0)
            let late = try await Self.consume(world, after: Self.int(early.last?["applied_seq"]))

            let earlyIds = early.map { Self.int($0["id"]) }
            let lateIds = late.map { Self.int($0["id"]) }
            #expect(!earlyIds.isEmpty && !lateIds.isEmpty)
            #expect(lateIds.allSatisfy { $0 < earlyIds.min()! }, "worker 0 planned first: its ids are the smaller ones")
            #expect(late.contains { $0["account_id"] as? String == held })
            let applied = try await world.connection.query("SELECT id FROM iap.corrections WHERE status = 'applied'").map { try $0.decode("id", as: Int64.self) }
            #expect((earlyIds + lateIds).sorted() == applied.sorted())
        }
    }

    /// A dry run and a run stopped by the revoke limit apply nothing: no event, nothing in the
    /// outbox; the text layout of `corrections` is a header then one escaped line each.
    @Test func aDryRunAndAnAbortedRunSayNothingAndTheTextLayoutEscapes() async throws {
        try await RunWorld.with("outbox-quiet") { world in
            // 120 accounts stored as entitled whose subscriptions lapsed long ago: every one is a revoke.
            var receipts: [[PostgresBind]] = []
            for index in 0..<120 {
                let account = index == 0 ? "acct\tone\nforged" : String(format: "lapsed-%03d", index)
                try await world.store(Entitlement(
                    accountId: account, productId: "pro.monthly", originalTransactionId: "\(20_000 + index)", state: .active,
                    expiresAt: world.expiry(endDays: 300)))
                receipts.append([PostgresBind(account), PostgresBind(syntheticReceipt(["generate": ["subscriptions": [
                    world.subscription(original: "\(20_000 + index)", renewals: 1, endDays: -30),
                ]]]))])
            }
            try await world.connection.copy(into: "iap.app_receipts", columns: ["account_id", "latest_receipt"], rows: receipts)
            let listener = try await world.database.connect()
            try await listener.execute("LISTEN iap_corrections")
            let environment = RunWorld.environment(world)
            let dry = try await CLIProcess.run(["run", "--dry-run", "--report-dir", world.reportRoot.path], environment: environment)
            #expect(dry.status == 0, "\(dry.stderr)")
            let aborted = try await CLIProcess.run(["backfill", "--all", "--report-dir", world.reportRoot.path], environment: environment)
            #expect(aborted.status == 3, "\(aborted.stderr)")
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'planned'") >= 120)
            #expect(try await Self.events(listener).isEmpty)
            #expect(try await Self.consume(world, after: 0).isEmpty)

            // Applied with the limit lifted: 120 revokes, in events and in the outbox.
            let applied = try await CLIProcess.run(["backfill", "--all", "--max-revoke-ratio", "1", "--report-dir", world.reportRoot.path],
                                                   environment: environment)
            #expect(applied.status == 0, "\(applied.stderr)")
            let events = try await Self.events(listener)
            #expect(events.map { Self.int(($0["kinds"] as? [String: Any])?["revoke"]) }.reduce(0, +) == 120)
            let text = try await CLIProcess.run(["corrections", "--after", "0"], environment: environment)
            let lines = text.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            #expect(lines.first == "APPLIED_SEQ\tID\tRUN\tAPPLIED_AT\tACCOUNT\tPRODUCT\tKIND\tREASON")
            #expect(lines.count == 121)
            #expect(lines.dropFirst().allSatisfy { $0.split(separator: "\t", omittingEmptySubsequences: false).count == 8 })
            #expect(lines.contains { $0.contains("acct\\tone\\nforged\tpro.monthly\trevoke\t") })
            // docs/events.md, "The outbox": a cursor that is not a non-negative integer is bad usage (exit 2), and lists nothing.
            for cursor in ["-1", "abc", "1.5", "99999999999999999999", ""] {
                let refused = try await CLIProcess.run(["corrections", "--after=\(cursor)"], environment: environment)
                #expect(refused.status == 2 && refused.stdout.isEmpty, "--after \(cursor.debugDescription): \(refused.status) \(refused.stderr)")
            }
            let limited = try await CLIProcess.run(["corrections", "--after", "100", "--limit", "5", "--json"], environment: environment)
            #expect(limited.stdout.split(separator: "\n").count == 5 && limited.stdout.hasPrefix(#"{"account_id":"#))
            await listener.close()
        }
    }
}
