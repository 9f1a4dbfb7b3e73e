import CivilCalendar
import Foundation
import Testing
import TestSupport

/// `explain ACCOUNT` against a real PostgreSQL, after a real run against the simulator: the
/// decision and the evidence lines of each kind of account, in both formats.
@Suite struct ExplainTests {
    static func day(_ date: Date) -> String { Timestamp.format(date) }

    /// A world after one run: each account a case of contract section 5, with known truth.
    static func world(_ body: (RunWorld) async throws -> Void) async throws {
        try await RunWorld.with("explain") { world in
            let cancelled = world.nowMs - world.dayMs
            try await world.addReceipt("active", spec: ["generate": ["subscriptions": [world.subscription(original: "100", endDays: 10)]]])
            try await world.addReceipt("refunded", spec: ["generate": ["subscriptions": [
                world.subscription(original: "200", endDays: 10, extra: ["cancel": ["at_ms": cancelled, "reason": 1]]),
            ]]])
            try await world.addReceipt("upgraded", spec: ["generate": ["subscriptions": [
                world.subscription(original: "300", endDays: 10, extra: ["cancel": ["at_ms": cancelled, "reason": 0, "upgraded": true]]),
                world.subscription(original: "310", renewals: 1, endDays: 300, product: "pro.yearly"),
            ]]])
            try await world.addReceipt("grace", spec: ["generate": ["subscriptions": [
                world.subscription(original: "400", endDays: -1, extra: ["grace_until_ms": world.nowMs + 5 * world.dayMs]),
            ]]])
            try await world.addReceipt("retry", spec: ["generate": ["subscriptions": [
                world.subscription(original: "500", endDays: -2, extra: ["billing_retry": true, "expiration_intent": 2]),
            ]]])
            try await world.addReceipt("family", spec: ["generate": ["subscriptions": [
                world.subscription(original: "600", endDays: 10, extra: ["ownership": "FAMILY_SHARED"]),
            ]]])
            try await world.addReceipt("drifted", spec: ["generate": ["subscriptions": [world.subscription(original: "700", endDays: 10)]]])
            try await world.addReceipt("deferred", spec: ["faults": [["status": 21199, "is_retryable": true]], "repeat_faults": true,
                                                          "generate": ["subscriptions": [world.subscription(original: "800", endDays: 10)]]])
            try await world.addReceipt("notified", spec: ["generate": ["subscriptions": [world.subscription(original: "900", endDays: 10)]]])
            let (summary, _) = try await world.run(world.options())
            #expect(summary.accountsProcessed == 9)
            // After the run: support edits a row by hand, and two notifications were matched.
            try await world.connection.execute("""
                UPDATE iap.entitlements SET state = 'expired', entitled = false WHERE account_id = 'drifted'
                """)
            try await world.connection.execute("""
                INSERT INTO iap.notifications (received_at, body, processed_at, outcome, account_id) VALUES
                  (now() - interval '2 hours', '{"notification_type": "DID_RENEW"}', now() - interval '1 hour', 'applied', 'notified'),
                  (now() - interval '1 hour', '{"signedPayload": "not.a.jws"}', now(), 'rejected', 'notified')
                """)
            try await world.connection.execute("UPDATE iap.notifications SET reason = 'jws_invalid: format' WHERE outcome = 'rejected'")
            try await body(world)
        }
    }

    static func explain(_ world: RunWorld, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await CLIProcess.run(["explain"] + arguments, environment: ["DATABASE_URL": world.database.connectionString])
    }

    /// The lines of one product's block in the text output.
    static func block(_ text: String, product: String) -> String {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0.hasPrefix("  \(product)  ") }) else { return "" }
        let end = lines[(start + 1)...].firstIndex { !$0.hasPrefix("    ") } ?? lines.endIndex
        return lines[start..<end].joined(separator: "\n")
    }

    @Test func textExplainsEachKindOfAccount() async throws {
        try await Self.world { world in
            let active = try await Self.explain(world, ["active"])
            #expect(active.status == 0, "\(active.stderr)")
            let activeBlock = Self.block(active.stdout, product: "pro.monthly")
            #expect(activeBlock.contains("decided  active, entitled, expires \(Self.day(world.expiry(endDays: 10)))"), "\(activeBlock)")
            #expect(activeBlock.contains("stored   active, entitled"))
            #expect(activeBlock.contains("why      current transaction 100002: the greatest expires_date of the product's 3 transaction(s) in 1 chain(s)"),
                    "\(activeBlock)")
            #expect(activeBlock.contains("agrees   the stored row is what the rules decide"))
            #expect(active.stdout.contains("Ledger, by product and chain, newest first\n  pro.monthly, chain 100\n"))
            #expect(active.stdout.contains("verified"))

            let refunded = Self.block(try await Self.explain(world, ["refunded"]).stdout, product: "pro.monthly")
            #expect(refunded.contains("decided  refunded, not entitled"), "\(refunded)")
            #expect(refunded.contains("(reason 1: an issue in the app), not an upgrade: refunded"), "\(refunded)")

            let upgradedText = try await Self.explain(world, ["upgraded"]).stdout
            #expect(Self.block(upgradedText, product: "pro.monthly").contains("decided  upgraded, not entitled"), "\(upgradedText)")
            #expect(Self.block(upgradedText, product: "pro.monthly").contains("by an upgrade (is_upgraded)"))
            #expect(Self.block(upgradedText, product: "pro.yearly").contains("decided  active, entitled"))

            let grace = Self.block(try await Self.explain(world, ["grace"]).stdout, product: "pro.monthly")
            #expect(grace.contains("decided  grace_period, entitled"), "\(grace)")
            #expect(grace.contains("billing grace period until \(Self.day(world.expiry(endDays: 5)))"), "\(grace)")

            let retryText = try await Self.explain(world, ["retry"]).stdout
            let retry = Self.block(retryText, product: "pro.monthly")
            #expect(retry.contains("decided  billing_retry, not entitled"), "\(retry)")
            #expect(retry.contains("Apple is still trying to bill"))
            #expect(retryText.contains("Renewal state Apple last gave"))
            #expect(retryText.contains("yes"))  // billing retry in the renewal table

            let family = Self.block(try await Self.explain(world, ["family"]).stdout, product: "pro.monthly")
            #expect(family.contains("family sharing"), "\(family)")
            #expect(family.contains("agrees"))

            let drifted = Self.block(try await Self.explain(world, ["drifted"]).stdout, product: "pro.monthly")
            #expect(drifted.contains("decided  active, entitled"), "\(drifted)")
            #expect(drifted.contains("stored   expired, not entitled"))
            #expect(drifted.contains("DIFFERS  the next run would grant"), "\(drifted)")

            let deferred = try await Self.explain(world, ["deferred"])
            #expect(deferred.status == 0)
            let receiptLine = deferred.stdout.split(separator: "\n").first { $0.contains("  deferred  ") }.map(String.init) ?? ""
            #expect(receiptLine.contains("21199"), "\(deferred.stdout)")
            #expect(receiptLine.contains("Z  1 "), "the next attempt is shown, then one failed attempt: \(receiptLine)")
            #expect(deferred.stdout.contains("Ledger, by product and chain, newest first\n  (none)"))

            let notified = try await Self.explain(world, ["notified"]).stdout
            let notifications = String(notified[notified.range(of: "Server notifications, newest first")!.lowerBound...])
            #expect(notifications.contains("v1 DID_RENEW"), "\(notifications)")
            #expect(notifications.contains("v2 (unverified)") && notifications.contains("jws_invalid: format"))
            // Newest first: the rejected one (an hour ago) before the applied one (two hours ago).
            #expect(notifications.range(of: "v2 (unverified)")!.lowerBound < notifications.range(of: "v1 DID_RENEW")!.lowerBound)
            // Corrections ever made, with their run.
            #expect(notified.contains("Corrections, newest first\n"))
            #expect(notified.contains("grant"))
        }
    }

    @Test func jsonHasTheDocumentedShapeAndTheSameDecisions() async throws {
        try await Self.world { world in
            for account in ["active", "refunded", "upgraded", "grace", "retry", "family", "drifted", "deferred", "notified"] {
                let result = try await Self.explain(world, [account, "--json"])
                #expect(result.status == 0, "\(result.stderr)")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
                #expect(Set(object.keys) == ["account_id", "as_of", "decisions", "receipts", "ledger", "renewals", "corrections", "notifications"])
                #expect(object["account_id"] as? String == account)
                let decisions = object["decisions"] as? [[String: Any]] ?? []
                let monthly = decisions.first { $0["product_id"] as? String == "pro.monthly" }
                let decided = monthly?["decided"] as? [String: Any]
                let expected: [String: (String, Bool, Bool)] = [  // state, entitled, agrees
                    "active": ("active", true, true), "refunded": ("refunded", false, true), "upgraded": ("upgraded", false, true),
                    "grace": ("grace_period", true, true), "retry": ("billing_retry", false, true), "family": ("active", true, true),
                    "drifted": ("active", true, false), "notified": ("active", true, true),
                ]
                if let (state, entitled, agrees) = expected[account] {
                    #expect(decided?["state"] as? String == state, "\(account)")
                    #expect(decided?["entitled"] as? Bool == entitled, "\(account)")
                    #expect(monthly?["agrees"] as? Bool == agrees, "\(account)")
                    #expect((monthly?["why"] as? [String])?.isEmpty == false)
                    #expect((object["ledger"] as? [Any])?.isEmpty == false)
                } else {
                    // The deferred account never verified: no ledger, no decision, one receipt due again.
                    #expect(decisions.isEmpty, "\(account)")
                    let receipts = object["receipts"] as? [[String: Any]] ?? []
                    #expect(receipts.count == 1)
                    #expect(receipts.first?["last_outcome"] as? String == "deferred")
                    #expect(receipts.first?["last_status"] as? Int == 21199)
                    #expect(receipts.first?["next_attempt_at"] is String)
                }
            }
            let drifted = try JSONSerialization.jsonObject(with: Data(try await Self.explain(world, ["drifted", "--json"]).stdout.utf8)) as? [String: Any]
            let next = ((drifted?["decisions"] as? [[String: Any]])?.first?["next_run"]) as? [String: Any]
            #expect(next?["kind"] as? String == "grant")
            let family = try JSONSerialization.jsonObject(with: Data(try await Self.explain(world, ["family", "--json"]).stdout.utf8)) as? [String: Any]
            let familyDecision = ((family?["decisions"] as? [[String: Any]])?.first?["decided"]) as? [String: Any]
            #expect(familyDecision?["ownership_type"] as? String == "FAMILY_SHARED")
        }
    }

    @Test func asOfDecidesAtThatTimeWithTheSameRules() async throws {
        try await Self.world { world in
            // Twenty days on, the active subscription (ending in ten) has expired: the next run would revoke.
            let later = Timestamp.format(world.now.addingTimeInterval(20 * 86_400))
            let result = try await Self.explain(world, ["active", "--as-of", later])
            let block = Self.block(result.stdout, product: "pro.monthly")
            #expect(block.contains("decided  expired, not entitled"), "\(result.stdout)")
            #expect(block.contains("DIFFERS  the next run would revoke"), "\(block)")
            // Half an hour after the expiry, the revoke waits for the expiry lag.
            let justAfter = Timestamp.format(world.expiry(endDays: 10).addingTimeInterval(1800))
            let lagged = Self.block(try await Self.explain(world, ["active", "--as-of", justAfter]).stdout, product: "pro.monthly")
            #expect(lagged.contains("waits for a later run"), "\(lagged)")
            #expect(lagged.contains("DIFFERS  a run after the expiry lag would revoke"), "\(lagged)")
            let bad = try await Self.explain(world, ["active", "--as-of", "yesterday"])
            #expect(bad.status == 2)
        }
    }

    @Test func anUnknownAccountAndAnUnreachableDatabaseExit1() async throws {
        try await Self.world { world in
            let unknown = try await Self.explain(world, ["nobody"])
            #expect(unknown.status == 1)
            #expect(unknown.stderr.contains("nothing is stored about account \"nobody\""), "\(unknown.stderr)")
            #expect(unknown.stdout.isEmpty)
            let port = freeLoopbackPort()
            let unreachable = try await CLIProcess.run(
                ["explain", "active"], environment: ["DATABASE_URL": "host=127.0.0.1 port=\(port) user=postgres dbname=none connect_timeout=5"])
            #expect(unreachable.status == 1)
            #expect(unreachable.stderr.contains("database.unreachable"), "\(unreachable.stderr)")
            #expect(unreachable.stderr.contains("127.0.0.1:\(port)"))
        }
    }
}

