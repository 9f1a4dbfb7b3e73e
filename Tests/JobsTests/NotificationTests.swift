import AppStoreModels
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// Server notifications against real PostgreSQL and the simulator (docs/notifications.md, "Server notifications (v1)").
@Suite struct NotificationTests {
    @Test func aRefundOfAFinishedConsumableReachesTheLedgerAndTheFinanceExport() async throws {
        try await RunWorld.with("refund") { world in
            // An earlier run recorded the purchase; Apple's answer no longer shows the finished consumable.
            try await world.addReceipt("gamer", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "90"]]]])
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity, environment)
                VALUES ('91', 'gamer', '91', 'coins.100', now() - interval '3 days', 1, 'Production')
                """)
            try await world.connection.execute("INSERT INTO iap.products (product_id, type, price, currency) VALUES ('coins.100', 'consumable', 0.99, 'USD')")
            let refundedAt = world.nowMs - 3_600_000
            try await V1Notifications.store(world, [V1Notifications.notification("REFUND", password: world.secret, original: "91", transactions: [[
                "transaction_id": "91", "original_transaction_id": "91", "product_id": "coins.100", "quantity": "1",
                "purchase_date_ms": String(world.nowMs - 3 * world.dayMs), "cancellation_date_ms": String(refundedAt),
                "cancellation_reason": "1",
            ]])])
            let (summary, _) = try await world.run(world.options())
            #expect(summary.notifications["REFUND"]?[.applied] == 1)
            let row = try await world.connection.query("SELECT cancellation_date, cancellation_reason FROM iap.transactions WHERE transaction_id = '91'")
            #expect(try row[0].decode("cancellation_date", as: Date?.self) == Date(timeIntervalSince1970: Double(refundedAt) / 1000))
            #expect(try row[0].decode("cancellation_reason", as: Int?.self) == 1)
            let notification = try await world.connection.query("SELECT outcome, account_id, run_id, processed_at FROM iap.notifications")
            #expect(try notification[0].decode("outcome", as: String?.self) == "applied")
            #expect(try notification[0].decode("account_id", as: String?.self) == "gamer")
            #expect(try notification[0].decode("run_id", as: Int64?.self) == summary.runId)
            // The refund is in the finance export; the answer without the consumable did not clear it.
            var events: [FinanceEvent] = []
            _ = try await FinanceLedger.forEachEvent(connection: world.connection, by: .event, from: Date().addingTimeInterval(-86_400),
                                                     to: Date().addingTimeInterval(86_400), includeSandbox: false, asOf: Date()) { events.append($0) }
            let refund = try #require(events.first { $0.kind == .refund })
            #expect([refund.accountId, refund.productId, refund.productType, refund.transactionId] == ["gamer", "coins.100", "consumable", "91"])
            #expect(refund.originalTransactionId == "91")
            // Processing again changes nothing.
            let (second, _) = try await world.run(world.options())
            #expect(second.notifications.isEmpty)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NULL") == 0)
        }
    }

    /// A notification another process holds when the run comes to it (the consumption job answering
    /// it, another shard) is tried again at the end, then counted and logged, not lost: its start is
    /// taken back (it was not processed, it is no step toward quarantine), and the next run takes it.
    @Test func aNotificationAnotherProcessHoldsIsCountedAndTakenNextRun() async throws {
        try await RunWorld.with("held-notification") { world in
            try await world.addReceipt("victim", spec: ["generate": ["subscriptions": [world.subscription(original: "50", endDays: 10)]]])
            _ = try await world.run(world.options())
            try await V1Notifications.store(world, [V1Notifications.notification("DID_CHANGE_RENEWAL_STATUS", password: world.secret, original: "50",
                                                                                   transactions: [["transaction_id": "50", "original_transaction_id": "50",
                                                                                                   "product_id": "pro.monthly"]])])
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            try await holder.execute("SELECT 1 FROM iap.notifications FOR UPDATE")
            let (held, _) = try await world.run(world.options())
            try await holder.execute("ROLLBACK")
            await holder.close()
            #expect(held.notificationsHeld == 1 && held.notifications.isEmpty, "\(held.notifications)")
            #expect(RunReport.short(held).contains("notifications held by another process: 1"))
            #expect(try await world.count("SELECT unfinished_starts FROM iap.notifications") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NULL") == 1)

            let (next, _) = try await world.run(world.options())
            #expect(next.notificationsHeld == nil)
            #expect(next.notifications.values.flatMap(\.values).reduce(0, +) == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NULL") == 0)
        }
    }

    @Test func aWrongPasswordChangesNothingAndIsRejected() async throws {
        try await RunWorld.with("rejected") { world in
            try await world.addReceipt("victim", spec: ["generate": ["subscriptions": [world.subscription(original: "50", endDays: 10)]]])
            _ = try await world.run(world.options())
            let ledger = try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values)
            try await V1Notifications.store(world, [V1Notifications.notification("REVOKE", password: "guess", original: "50", transactions: [[
                "transaction_id": "50", "original_transaction_id": "50", "product_id": "pro.monthly",
                "cancellation_date_ms": String(world.nowMs), "cancellation_reason": "0",
            ]])])
            let (summary, _) = try await world.run(world.options())
            #expect(summary.notifications["REVOKE"]?[.rejected] == 1)
            #expect(summary.accountsProcessed == 0)  // nothing made due
            #expect(try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values) == ledger)
            let row = try await world.connection.query("SELECT outcome, processed_at, account_id FROM iap.notifications")
            #expect(try row[0].decode("outcome", as: String?.self) == "rejected")
            #expect(try row[0].decode("processed_at", as: Date?.self) != nil)
            #expect(try row[0].decode("account_id", as: String?.self) == nil)
        }
    }

    @Test func unmatchedIsRetriedAndMatchedOnceTheLedgerHasIt() async throws {
        try await RunWorld.with("unmatched") { world in
            try await world.addReceipt("late", spec: ["generate": ["subscriptions": [world.subscription(original: "777", endDays: 10)]]])
            try await V1Notifications.store(world, [V1Notifications.notification("DID_RENEW", password: world.secret, original: "777")])
            // First run: processed before any account is verified, so nobody owns 777 yet.
            let (first, _) = try await world.run(world.options())
            #expect(first.notifications["DID_RENEW"]?[.unmatched] == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NULL AND outcome = 'unmatched'") == 1)
            // That run verified the account; the next one matches the notification.
            let (second, _) = try await world.run(world.options())
            #expect(second.notifications["DID_RENEW"]?[.applied] == 1)
            #expect(second.accountsProcessed == 1)  // made due, re-verified in the same run
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NOT NULL AND account_id = 'late'") == 1)
        }
    }

    @Test func unmatchedIsGivenUpAfterTheMaximumAge() async throws {
        try await RunWorld.with("givenup") { world in
            try await V1Notifications.store(world, [V1Notifications.notification("DID_RENEW", password: world.secret, original: "404")],
                                 receivedAt: "now() - interval '8 days'")
            let (summary, _) = try await world.run(world.options())
            #expect(summary.notifications["DID_RENEW"]?[.unmatched] == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NOT NULL AND outcome = 'unmatched'") == 1)
        }
    }

    @Test func didRenewReverifiesTheAccountInTheSameRun() async throws {
        try await RunWorld.with("didrenew") { world in
            try await world.addReceipt("renewer", spec: ["generate": ["subscriptions": [world.subscription(original: "60", renewals: 2, endDays: 20)]]])
            try await world.store(Entitlement(accountId: "renewer", productId: "pro.monthly", originalTransactionId: "60",
                                              latestTransactionId: "60", state: .active, expiresAt: world.expiry(endDays: -10)))
            // Verified an hour ago: not due for the nightly run...
            try await world.connection.execute("UPDATE iap.app_receipts SET last_verified_at = now() - interval '1 hour'")
            try await V1Notifications.store(world, [
                V1Notifications.notification("DID_RENEW", password: world.secret, original: "60"),
                V1Notifications.notification("CONSUMPTION_REQUEST", password: world.secret, original: "60"),
                #"{"unified_receipt": {"status": 0}}"#,
            ])
            // ...but the notification makes it due now.
            let (summary, _) = try await world.run(world.options())
            #expect(summary.notifications["DID_RENEW"]?[.applied] == 1)
            #expect(summary.notifications["(none)"]?[.invalid] == 1)
            #expect(summary.consumptionRequests.count == 1)
            #expect(summary.accountsProcessed == 1)
            #expect(summary.corrections["extend"] == 1)
            let receipt = try await world.connection.query("SELECT last_run_id, reverify_requested_at FROM iap.app_receipts")
            #expect(try receipt[0].decode("last_run_id", as: Int64?.self) == summary.runId)
            #expect(try receipt[0].decode("reverify_requested_at", as: Date?.self) == nil)
            #expect(try await world.entitlements()["renewer/pro.monthly"]?.expiresAt == world.expiry(endDays: 20))
            // The report counts them and lists the CONSUMPTION_REQUEST.
            let markdown = RunReport.markdown(summary)
            #expect(markdown.contains("| DID_RENEW | 1 | 0 | 0 | 0 |"))
            #expect(markdown.contains("CONSUMPTION_REQUEST"))
        }
    }

    @Test func ingestReportsLinesThatAreNotJSONAndKeepsTheRest() async throws {
        try await RunWorld.with("ingest") { world in
            let input = world.reportRoot.appending(path: "notifications.jsonl")
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let good = V1Notifications.notification("DID_RENEW", password: world.secret, original: "1")
            try [good, "{not json", "", "[1, 2]", good].joined(separator: "\n").write(to: input, atomically: true, encoding: .utf8)
            let fixture = TestPaths.fixtures.appending(path: "notifications/aporat-serverNotificationRequest-DID_RENEW.json")
            let result = try await CLIProcess.run(["ingest-notifications", input.path, fixture.path],
                                                  environment: ["DATABASE_URL": world.database.connectionString])
            #expect(result.status == 1)
            #expect(result.stdout.contains("Stored 3 notification(s)."))
            #expect(result.stderr.contains("notifications.jsonl:2: not a JSON object"))
            #expect(result.stderr.contains("notifications.jsonl:4: not a JSON object"))
            #expect(!result.stderr.contains(":1:") && !result.stderr.contains(":5:"))
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 3)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE body->>'notification_type' = 'DID_RENEW'") == 3)
            let clean = try await CLIProcess.run(["ingest-notifications", fixture.path],
                                                 environment: ["DATABASE_URL": world.database.connectionString])
            #expect(clean.status == 0)
        }
    }
}
