import AppStoreModels
import AppleSimulator
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// Server Notifications V2 against real PostgreSQL and the simulator (docs/notifications.md, "Signed data and Server Notifications V2"), signed
/// by the simulator's own chain, which the run is told to trust.
@Suite struct NotificationV2Tests {
    @Test func aV2RefundOfAFinishedConsumableReachesTheLedgerAndTheFinanceCSVWithItsPrice() async throws {
        try await RunWorld.with("v2-refund") { world in
            try await V2Notifications.gamer(world)
            let refundedAt = world.nowMs - 3_600_000
            #expect(try await V2Notifications.ingest(world, [V2Notifications.body("REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: refundedAt))]) == 1)
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            let row = try await world.connection.query("""
                SELECT cancellation_date, cancellation_reason, price_milliunits, currency, source FROM iap.transactions WHERE transaction_id = '91'
                """)[0]
            #expect(try row.decode("cancellation_date", as: Date?.self) == Date(ms: refundedAt))
            #expect(try row.decode("cancellation_reason", as: Int?.self) == 1)
            #expect(try row.decode("price_milliunits", as: Int64?.self) == 990)
            #expect(try row.decode("currency", as: String?.self) == "EUR")
            #expect(try row.decode("source", as: String?.self) == "notification_v2")
            let notification = try await world.connection.query("SELECT outcome, account_id, reason FROM iap.notifications")[0]
            #expect(try notification.decode("outcome", as: String?.self) == "applied")
            #expect(try notification.decode("account_id", as: String?.self) == "gamer")
            // The refund is in the finance CSV with the transaction's own price (no catalog entry exists).
            var events: [FinanceEvent] = []
            _ = try await FinanceLedger.forEachEvent(connection: world.connection, by: .event, from: Date().addingTimeInterval(-86_400),
                                                     to: Date().addingTimeInterval(86_400), includeSandbox: false, asOf: Date()) { events.append($0) }
            let refund = try #require(events.first { $0.kind == .refund })
            #expect([refund.accountId, refund.productId] == ["gamer", "coins.100"])
            #expect([refund.environment, refund.currency] == ["Production", "EUR"])
            // The signed price, and the money back: all of it (no revocationType).
            #expect(refund.price == 990 && refund.amount == -990 && refund.amountSource == .signed)
            // The same run re-verified the account with Apple.
            #expect(summary.accountsProcessed == 1)
        }
    }

    @Test func aTamperedOrForeignNotificationChangesNothingAndIsReported() async throws {
        try await RunWorld.with("v2-rejected") { world in
            try await V2Notifications.gamer(world)
            _ = try await world.run(V2Notifications.options(world))
            let ledger = try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values)
            let refund = V2Notifications.consumable("91", world: world, revokedAt: world.nowMs)
            _ = try await V2Notifications.ingest(world, [
                try V2Notifications.body("REFUND", transaction: refund, fault: .tamperedPayload),
                try V2Notifications.body("REFUND", transaction: refund, bundleId: "com.example.other"),
                try V2Notifications.body("REFUND", transaction: refund, fault: .expiredLeaf),
            ])
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 (unverified)"]?[.rejected] == 3)
            #expect(summary.accountsProcessed == 0)  // nothing made due
            #expect(try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values) == ledger)
            let reasons = try await world.connection.query("SELECT reason FROM iap.notifications WHERE outcome = 'rejected' ORDER BY id")
                .map { try $0.decode("reason", as: String.self) }
            #expect(reasons == ["jws_invalid: signature", "jws_invalid: bundle", "jws_invalid: validity"])
            #expect(summary.notificationsRejected?.count == 3)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE processed_at IS NULL") == 0)
            let markdown = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "summary.md"), encoding: .utf8)
            #expect(markdown.contains("## Rejected notifications"))
            #expect(markdown.contains("jws_invalid: signature"))
        }
    }

    /// No signedDate anywhere: the certificates cannot be checked at the time Apple signed, so the
    /// notification is rejected for validity and its refund never reaches the ledger (issue 29).
    @Test func aNotificationWithNoSignedDateIsRejectedForValidity() async throws {
        try await RunWorld.with("v2-undated") { world in
            try await V2Notifications.gamer(world)
            _ = try await world.run(V2Notifications.options(world))
            let ledger = try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values)
            _ = try await V2Notifications.ingest(world, [
                try V2Notifications.body("REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: world.nowMs), undated: true),
            ])
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 (unverified)"]?[.rejected] == 1)
            #expect(summary.accountsProcessed == 0)
            let reason = try await world.connection.query("SELECT reason FROM iap.notifications WHERE outcome = 'rejected'")
                .map { try $0.decode("reason", as: String.self) }
            #expect(reason == ["jws_invalid: validity"])
            #expect(try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values) == ledger)
        }
    }

    /// A date no Apple can send (issue 32): a forged 9e18 `signedDate` once stopped every run at a
    /// trap before the signature was checked. Now it is that notification's format error, and the
    /// run goes on: the good refund beside it still reaches the ledger.
    @Test(arguments: [
        (signedDate: "9000000000000000000", fault: nil), (signedDate: "-9223372036854775808", fault: nil),
        (signedDate: "253402300800000", fault: nil), (signedDate: "9000000000000000000", fault: SigningChain.Fault.tamperedPayload),
    ] as [(signedDate: String, fault: SigningChain.Fault?)])
    func aDateNoAppleCanSendIsThatNotificationsErrorNeverATrap(signedDate: String, fault: SigningChain.Fault?) async throws {
        try await RunWorld.with("v2-hostile-date") { world in
            try await V2Notifications.gamer(world)
            _ = try await world.run(V2Notifications.options(world))
            let hostile = try V2Notifications.body("REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: world.nowMs),
                                        fault: fault, signedDate: Int64(signedDate)!)
            let refundedAt = world.nowMs - 60_000
            _ = try await V2Notifications.ingest(world, [hostile, try V2Notifications.body("REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: refundedAt))])
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 (unverified)"]?[.rejected] == 1)
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            let reasons = try await world.connection.query("SELECT reason FROM iap.notifications WHERE outcome = 'rejected'")
                .map { try $0.decode("reason", as: String.self) }
            #expect(reasons.count == 1)
            #expect(reasons.first?.hasPrefix("jws_invalid:") == true)
            let cancelled = try await world.connection.query("SELECT cancellation_date FROM iap.transactions WHERE transaction_id = '91'")[0]
            #expect(try cancelled.decode("cancellation_date", as: Date?.self) == Date(ms: refundedAt))
        }
    }

    /// A certificate in x5c that ends before it begins (found by fuzzing after issue 32: one digit
    /// of a real Apple notification's chain changed). The validity check made a range of its dates
    /// and trapped, in every run that processed the stored body. Now it is that notification's
    /// rejection, and the good refund beside it is applied.
    @Test func aCertificateThatEndsBeforeItBeginsIsThatNotificationsRejection() async throws {
        try await RunWorld.with("v2-inverted-validity") { world in
            try await V2Notifications.gamer(world)
            let jws = String(decoding: try Data(contentsOf: TestPaths.repositoryRoot.appending(
                path: "FuzzTesting/FailCases/jws/jws-crash-0e7de8e114da672f9367c59a30874ac26861d170")), as: UTF8.self)
            let hostile = String(decoding: try JSONSerialization.data(withJSONObject: ["signedPayload": jws]), as: UTF8.self)
            let refundedAt = world.nowMs - 60_000
            _ = try await V2Notifications.ingest(world, [hostile, try V2Notifications.body("REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: refundedAt))])
            let (summary, ending) = try await world.run(V2Notifications.options(world))
            #expect(ending == .completed)
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            let reasons = try await world.connection.query("SELECT reason FROM iap.notifications WHERE outcome = 'rejected'")
                .map { try $0.decode("reason", as: String.self) }
            #expect(reasons.count == 1 && reasons.first?.hasPrefix("jws_invalid:") == true, "\(reasons)")
        }
    }

    @Test func theSameNotificationStoredTwiceIsProcessedOnce() async throws {
        try await RunWorld.with("v2-once") { world in
            try await V2Notifications.gamer(world)
            let body = try V2Notifications.body("REFUND", uuid: "6c1b7e0a-0000-4000-8000-000000000091",
                                     transaction: V2Notifications.consumable("91", world: world, revokedAt: world.nowMs - 60_000))
            // Apple sends it again: stored once.
            #expect(try await V2Notifications.ingest(world, [body, body]) == 1)
            #expect(try await V2Notifications.ingest(world, [body]) == 0)
            // The app server kept a copy wrapped differently: stored, and found to be the same notification.
            let signedPayload = try #require(NotificationV2Body.signedPayload(Array(body.utf8)))
            let wrapped = String(decoding: try JSONSerialization.data(withJSONObject: ["signedPayload": signedPayload, "receivedBy": "gateway-2"]), as: UTF8.self)
            #expect(try await V2Notifications.ingest(world, [wrapped]) == 1)
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            #expect(summary.notifications["v2 REFUND"]?[.duplicate] == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 2)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE notification_uuid = '6c1b7e0a-0000-4000-8000-000000000091'") == 2)
        }
    }

    /// A REFUND signed before the account's last live verification, which showed no refund and so
    /// rewrote no row, is stale all the same (docs/database.md, "The ledger"): no refund in the
    /// ledger, none in the journal.
    @Test func aRefundSignedBeforeTheLastLiveVerificationIsStale() async throws {
        try await RunWorld.with("v2-stale-refund") { world in
            let purchased = world.nowMs - 3 * world.dayMs
            try await world.addReceipt("owner", spec: ["generate": ["purchases": [
                ["product_id": "lifetime", "transaction_id": "90", "purchase_ms": purchased, "in_latest": true],
            ]]])
            var options = V2Notifications.options(world)
            options.selection = AccountSelection(kind: .due(staleAfter: .zero))
            _ = try await world.run(options)
            let signed = Int64(Date().timeIntervalSince1970 * 1000)
            try await Task.sleep(for: .milliseconds(20))
            // Apple's live answer again, unchanged: no ledger row is rewritten.
            _ = try await world.run(options)
            let refund = try V2Notifications.body("REFUND", transaction: [
                "transactionId": "90", "originalTransactionId": "90", "productId": "lifetime", "type": "Non-Consumable", "quantity": 1,
                "purchaseDate": purchased, "originalPurchaseDate": purchased, "inAppOwnershipType": "PURCHASED",
                "price": 2990, "currency": "USD", "revocationDate": signed - 1_000, "revocationReason": 1,
            ], signedDate: signed)
            #expect(try await V2Notifications.ingest(world, [refund]) == 1)
            _ = try await world.run(options)
            let row = try await world.connection.query("SELECT cancellation_date FROM iap.transactions WHERE transaction_id = '90'")[0]
            #expect(try row.decode("cancellation_date", as: Date?.self) == nil)
            // The price it signed is still the purchase's (the world's catalog has none): an adjustment, never a refund.
            let events: [String] = try await world.connection.query("""
                SELECT event || ' ' || COALESCE(amount_milliunits::text, '-') || ' ' || amount_source AS event
                FROM iap.finance_journal WHERE transaction_id = '90' ORDER BY id
                """).map { try $0.decode("event") }
            #expect(events == ["purchase - none", "adjustment 2990 signed"])
        }
    }

    /// A consumable's REFUND signed before a live verification is not stale: verifyReceipt cannot
    /// show a consumable's refund, so its answer was never current for it (docs/database.md, "The
    /// ledger"). The refund is in the ledger and the journal.
    @Test func aConsumablesRefundSignedBeforeALiveVerificationStands() async throws {
        try await RunWorld.with("v2-consumable-refund") { world in
            try await world.catalog(["coins.100": .consumable])
            let purchased = world.nowMs - 3 * world.dayMs
            try await world.addReceipt("gamer", spec: ["generate": ["purchases": [
                ["product_id": "coins.100", "transaction_id": "95", "purchase_ms": purchased, "in_latest": true],
            ]]])
            var options = V2Notifications.options(world)
            options.selection = AccountSelection(kind: .due(staleAfter: .zero))
            let signed = Int64(Date().timeIntervalSince1970 * 1000)
            try await Task.sleep(for: .milliseconds(20))
            // The account verified live after Apple signed the REFUND, before it is processed.
            _ = try await world.run(options)
            var transaction = V2Notifications.consumable("95", world: world, revokedAt: signed - 1_000)
            (transaction["purchaseDate"], transaction["originalPurchaseDate"]) = (purchased, purchased)
            #expect(try await V2Notifications.ingest(world, [try V2Notifications.body("REFUND", transaction: transaction, signedDate: signed)]) == 1)
            _ = try await world.run(options)
            let row = try await world.connection.query("SELECT cancellation_date FROM iap.transactions WHERE transaction_id = '95'")[0]
            #expect(try row.decode("cancellation_date", as: Date?.self) == Date(ms: signed - 1_000))
            // The signed 9.90 EUR back, whole (no revocationType).
            let refunds: [Int64] = try await world.connection.query(
                "SELECT amount_milliunits FROM iap.finance_journal WHERE transaction_id = '95' AND event = 'refund'").map { try $0.decode("amount_milliunits") }
            #expect(refunds == [-990])
        }
    }

    @Test func aRefundReversalClearsTheRefundOnlyWhenTheSignedTransactionSaysSo() async throws {
        try await RunWorld.with("v2-reversal") { world in
            try await V2Notifications.gamer(world, cancelled: true)
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                              environment, cancellation_date, cancellation_reason)
                VALUES ('92', 'gamer', '92', 'coins.100', now() - interval '3 days', 1, 'Production', now() - interval '1 day', 0)
                """)
            let stillRefunded = world.nowMs - world.dayMs
            _ = try await V2Notifications.ingest(world, [
                try V2Notifications.body("REFUND_REVERSED", transaction: V2Notifications.consumable("91", world: world)),
                try V2Notifications.body("REFUND_REVERSED", transaction: V2Notifications.consumable("92", world: world, revokedAt: stillRefunded)),
            ])
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 REFUND_REVERSED"]?[.applied] == 2)
            let rows = try await world.connection.query("SELECT transaction_id, cancellation_date, cancellation_reason FROM iap.transactions WHERE transaction_id IN ('91', '92') ORDER BY transaction_id")
            #expect(try rows[0].decode("cancellation_date", as: Date?.self) == nil)
            #expect(try rows[0].decode("cancellation_reason", as: Int?.self) == nil)
            #expect(try rows[1].decode("cancellation_date", as: Date?.self) == Date(ms: stillRefunded))
        }
    }

    @Test func testNotificationsAreRecordedAndTypesAreCountedWithTheirSubtypes() async throws {
        try await RunWorld.with("v2-types") { world in
            try await world.addReceipt("subscriber", spec: ["generate": ["subscriptions": [world.subscription(original: "50", endDays: 10)]]])
            _ = try await world.run(V2Notifications.options(world))
            let renewal: [String: Any] = [
                "transactionId": "50", "originalTransactionId": "50", "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
                "purchaseDate": world.nowMs - 20 * world.dayMs, "expiresDate": world.nowMs + 10 * world.dayMs,
            ]
            _ = try await V2Notifications.ingest(world, [
                try V2Notifications.body("TEST", environment: "Sandbox"),
                try V2Notifications.body("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", transaction: renewal),
            ])
            let (summary, _) = try await world.run(V2Notifications.options(world))
            #expect(summary.notifications["v2 TEST"]?[.recorded] == 1)
            #expect(summary.notifications["v2 DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED"]?[.applied] == 1)
            #expect(summary.accountsProcessed == 1)  // made due and re-verified in the same run
            let markdown = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "summary.md"), encoding: .utf8)
            #expect(markdown.contains("| v2 DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED | 1 |"))
        }
    }
}
