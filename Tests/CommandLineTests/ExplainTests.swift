import CivilCalendar
import Foundation
import Postgres
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// `explain ACCOUNT` against a real PostgreSQL, after a real run against the simulator: the
/// decision and the evidence lines of each kind of account, in both formats.
@Suite struct ExplainTests {
    static func day(_ date: Date) -> String { Timestamp.format(date) }

    /// A world after one run: each account a case of docs/guarantees.md, "Entitlement rules", with known truth.
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
            // Issue 29: Apple keeps failing for an account the app server granted; the run must leave its row alone.
            try await world.addReceipt("deferred-entitled", spec: ["faults": [["status": 21199, "is_retryable": true]], "repeat_faults": true,
                                                                   "generate": ["subscriptions": [world.subscription(original: "810", endDays: 10)]]])
            try await world.store(Entitlement(accountId: "deferred-entitled", productId: "pro.monthly", originalTransactionId: "810",
                                              latestTransactionId: "810", state: .active, expiresAt: world.expiry(endDays: 10), autoRenew: true,
                                              environment: "Production"))
            try await world.addReceipt(Self.hostile, spec: ["generate": ["subscriptions": [world.subscription(original: "1000", endDays: 10)]]])
            let (summary, _) = try await world.run(world.options())
            #expect(summary.accountsProcessed == 11)
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

    /// An account id that forges a line and retitles the terminal, if printed raw.
    static let hostile = "evil\nAccount forged\u{1b}]0;owned\u{07}"

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
            #expect(activeBlock.contains("why      current transaction 100002: the greatest expires_date of the 3 transaction(s) of chain 100"),
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
            // The renewal table's row: chain, product, auto-renew, next product, billing retry, ...
            let renewalRow = Self.rows(retryText, section: "Renewal state Apple last gave").dropFirst().first ?? []
            #expect(renewalRow.count >= 5 && renewalRow[1] == "pro.monthly" && renewalRow[4] == "yes", "\(renewalRow)")

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
            // run, run started, product, kind, status, applied, reason
            let corrections = Self.rows(notified, section: "Corrections, newest first").dropFirst()
            #expect(corrections.contains { $0.count >= 5 && $0[3] == "grant" && $0[4] == "applied" }, "\(corrections)")
        }
    }

    /// The cells of each table line in one section of the text layout (columns are separated by
    /// two spaces or more), the header first.
    static func rows(_ text: String, section title: String) -> [[String]] {
        guard let start = text.range(of: title + "\n") else { return [] }
        let lines = text[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false)
        return lines.prefix { $0.hasPrefix("  ") }.map { line in
            line.split(separator: /\s{2,}/).map(String.init)
        }
    }

    @Test func jsonHasTheDocumentedShapeAndTheSameDecisions() async throws {
        try await Self.world { world in
            for account in ["active", "refunded", "upgraded", "grace", "retry", "family", "drifted", "deferred", "notified"] {
                let result = try await Self.explain(world, [account, "--json"])
                #expect(result.status == 0, "\(result.stderr)")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
                #expect(Set(object.keys) == ["account_id", "as_of", "standing", "decisions", "receipts", "ledger", "renewals", "corrections",
                                             "notifications", "quarantine", "quarantined_notification_ids", "money",
                                             "consumption_requests", "first_night"])
                #expect(object["quarantine"] is NSNull && (object["quarantined_notification_ids"] as? [Any])?.isEmpty == true)
                let standing = object["standing"] as? [String: Any]
                #expect(standing?["state"] as? String == (account == "deferred" ? "unverified" : "verified"), "\(account)")
                #expect(standing?["verified"] as? Bool == (account != "deferred"), "\(account)")
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
                    #expect(receipts.first?["failed_runs"] as? Int == 1)
                    let failure = receipts.first?["last_failure"] as? [String: Any]
                    #expect(failure?["attempts"] as? Int == 2)  // the world's --max-attempts, as failures.csv says
                    #expect(failure?["endpoints"] as? String == "Production>Production")
                    #expect((failure?["reason"] as? String)?.contains("21199") == true)
                    #expect(standing?["receipts_failing"] as? [Int] == [receipts.first?["id"] as? Int ?? -1])
                }
                let verdict = monthly?["verdict"] as? [String: Any]
                // Access is the stored row's: the hand-edited "drifted" row grants none, whatever the rules decide.
                if let (_, entitled, _) = expected[account] { #expect(verdict?["access"] as? Bool == (account == "drifted" ? false : entitled), "\(account)") }
            }
            let drifted = try JSONSerialization.jsonObject(with: Data(try await Self.explain(world, ["drifted", "--json"]).stdout.utf8)) as? [String: Any]
            let next = ((drifted?["decisions"] as? [[String: Any]])?.first?["next_run"]) as? [String: Any]
            #expect(next?["kind"] as? String == "grant")
            let family = try JSONSerialization.jsonObject(with: Data(try await Self.explain(world, ["family", "--json"]).stdout.utf8)) as? [String: Any]
            let familyDecision = ((family?["decisions"] as? [[String: Any]])?.first?["decided"]) as? [String: Any]
            #expect(familyDecision?["ownership_type"] as? String == "FAMILY_SHARED")
        }
    }

    /// Issue 29, item 2: an account whose receipts do not verify gets no correction
    /// (docs/guarantees.md, "Entitlement rules"), so `explain` must not announce a revoke. It says the account is not verified,
    /// why (in failures.csv's words and numbers), when it is tried next, and that its rows stay.
    @Test func anUnverifiedAccountIsNeverShownAsAboutToBeRevoked() async throws {
        try await Self.world { world in
            let result = try await Self.explain(world, ["deferred-entitled"])
            #expect(result.status == 0, "\(result.stderr)")
            let text = result.stdout
            #expect(!text.contains("DIFFERS") && !text.contains("would revoke"), "\(text)")
            #expect(!text.contains("non_consumable"), "the stored row expires: a subscription, not a non-consumable: \(text)")
            #expect(text.contains("pro.monthly  auto_renewable (guessed from the stored row (no transaction is stored))"), "\(text)")
            #expect(text.contains("NOT VERIFIED: no run changes this account's entitlements until every one of its receipts verifies"))
            #expect(text.contains("held     the account is not verified"))
            // The failure as failures.csv says it: same reason, same attempts, same hosts.
            let failures = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "failures.csv"), encoding: .utf8)
            let row = try #require(failures.split(separator: "\r\n").first { $0.hasPrefix("deferred-entitled,") })
            let fields = row.split(separator: ",", maxSplits: 6).map(String.self.init)
            #expect(fields[2] == "deferred" && fields[4] == "2" && fields[5] == "Production>Production", "\(row)")
            let reason = fields[6].hasPrefix("\"") ? String(fields[6].dropFirst().dropLast()) : fields[6]
            #expect(text.contains(": deferred after 2 attempt(s) (Production>Production): \(reason) (21199: internal data access error)"),
                    "\(text)")
            #expect(text.contains("    decided  nothing yet: the account is not verified\n"), "\(text)")
            #expect(text.contains("1 run(s) in a row failed; tried again by the first run after "), "\(text)")
            // Support's answer first: the stored row still grants access.
            let lines = text.split(separator: "\n")
            #expect(lines[1] == "  pro.monthly: ACCESS until \(Explanation.moment(world.expiry(endDays: 10))) (subscription active, auto-renew on)",
                    "\(text)")
            // JSON says the same.
            let json = try #require(try JSONSerialization.jsonObject(with: Data(try await Self.explain(world, ["deferred-entitled", "--json"]).stdout.utf8))
                as? [String: Any])
            #expect((json["standing"] as? [String: Any])?["state"] as? String == "unverified")
            let decision = try #require((json["decisions"] as? [[String: Any]])?.first)
            #expect(decision["next_run"] is NSNull && decision["agrees"] as? Bool == true)
            #expect(decision["type"] as? String == "auto_renewable")
            // And the run indeed left the row alone.
            #expect(try await world.entitlements()["deferred-entitled/pro.monthly"]?.state == .active)
        }
    }

    /// Issue 29, item 3: the first line under the account answers "does this customer have access?" in words.
    @Test func theVerdictComesFirstWithCodesInWords() async throws {
        try await Self.world { world in
            func firstLine(_ account: String) async throws -> String {
                let text = try await Self.explain(world, [account]).stdout
                return String(text.split(separator: "\n", omittingEmptySubsequences: false)[1])
            }
            let cancelled = Explanation.moment(Date(ms: world.nowMs - world.dayMs))
            #expect(try await firstLine("refunded") == "  pro.monthly: NO ACCESS since \(cancelled) (refunded, reason 1: an issue in the app)")
            #expect(try await firstLine("active") == "  pro.monthly: ACCESS until \(Explanation.moment(world.expiry(endDays: 10))) (subscription active, auto-renew on)")
            #expect(try await firstLine("grace").hasPrefix("  pro.monthly: ACCESS until \(Explanation.moment(world.expiry(endDays: 5))) (billing grace period: "
                                                          + "the renewal due \(Explanation.moment(world.expiry(endDays: -1))) failed"))
            #expect(try await firstLine("retry") == "  pro.monthly: NO ACCESS since \(Explanation.moment(world.expiry(endDays: -2))) (billing retry: "
                    + "the renewal payment failed and Apple is still trying to bill; expiration intent 2: a billing error)")
            #expect(try await firstLine("upgraded") == "  pro.monthly: NO ACCESS to this product since \(cancelled) (upgraded: "
                    + "the customer moved to a higher product of the same subscription group)")
            // The refunded row reads as refunded, never as "expires" alone.
            let refunded = Self.block(try await Self.explain(world, ["refunded"]).stdout, product: "pro.monthly")
            #expect(refunded.contains("stored   refunded, not entitled, refunded ") && refunded.contains(", was paid until "), "\(refunded)")
            #expect(!refunded.contains("expires 20"), "\(refunded)")
            // A support edit the next run would undo is said on the verdict line.
            #expect(try await firstLine("drifted") == "  pro.monthly: NO ACCESS since \(Explanation.moment(world.expiry(endDays: 10))) (expired); "
                    + "the next run would grant it")
        }
    }

    /// Issue 29, item 4: an account id with a line feed and ESC/BEL is printed escaped, on one line.
    @Test func aHostileAccountIdIsPrintedEscaped() async throws {
        try await Self.world { world in
            let result = try await Self.explain(world, [Self.hostile])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.hasPrefix("Account evil\\nAccount forged\\u001b]0;owned\\u0007, as of "), "\(result.stdout)")
            #expect(!result.stdout.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n") || $0.value == 0x7F })
            #expect(result.stdout.split(separator: "\n").filter { $0.hasPrefix("Account ") }.count == 1)
            // JSON keeps it exactly, in its own escapes.
            let json = try JSONSerialization.jsonObject(with: Data(try await Self.explain(world, [Self.hostile, "--json"]).stdout.utf8)) as? [String: Any]
            #expect(json?["account_id"] as? String == Self.hostile)
        }
    }

    /// `explain --expiry-lag` is the lag it decides with (issue 45: ignoring it, explain used one
    /// hour and every test passed): a subscription that lapsed two hours ago, stored as active, is
    /// revoked by the next run at the default hour, and held at three.
    @Test func explainsExpiryLagIsTheOneGiven() async throws {
        try await RunWorld.with("explain-lag") { world in
            try await world.addReceipt("lapsed", spec: ["generate": ["subscriptions": [world.subscription(original: "100", endDays: -2.0 / 24)]]])
            _ = try await world.run(world.options())
            try await world.connection.execute("UPDATE iap.entitlements SET state = 'active', entitled = true WHERE account_id = 'lapsed'")
            func decision(_ arguments: [String]) async throws -> [String: Any] {
                let result = try await ExplainTests.explain(world, ["lapsed", "--json"] + arguments)
                #expect(result.status == 0, "\(result.stderr)")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
                return try #require((object["decisions"] as? [[String: Any]])?.first)
            }
            let hour = try await decision([])
            #expect(hour["held_by_expiry_lag"] as? Bool == false)
            #expect((hour["next_run"] as? [String: Any])?["kind"] as? String == "revoke")
            let threeHours = try await decision(["--expiry-lag", "3h"])
            #expect(threeHours["held_by_expiry_lag"] as? Bool == true)
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

