import AppStoreModels
import AppleSimulator
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport

/// Server Notifications V2 against real PostgreSQL and the simulator (docs/notifications.md, "Signed data and Server Notifications V2"), signed
/// by the simulator's own chain, which the run is told to trust.
@Suite struct NotificationV2Tests {
    static let chain = try! SigningChain.create()
    static let appAppleId: Int64 = 1234

    static func options(_ world: RunWorld) -> RunOptions {
        var options = world.options()
        options.appleRootCertificates = [chain.root]
        options.bundleIds = ["com.example.app"]
        options.appAppleId = appAppleId
        return options
    }

    /// A V2 body: `transaction` is signed inside it as signedTransactionInfo.
    static func body(
        _ type: String, subtype: String? = nil, uuid: String = UUID().uuidString.lowercased(), transaction: [String: Any]? = nil,
        bundleId: String = "com.example.app", environment: String = "Production", fault: SigningChain.Fault? = nil,
        undated: Bool = false, signedDate: Any? = nil
    ) throws -> String {
        var data: [String: Any] = ["bundleId": bundleId, "environment": environment, "appAppleId": appAppleId]
        if let transaction { data["transactionInfo"] = transaction }
        var spec: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data]
        if let subtype { spec["subtype"] = subtype }
        if let fault { spec["simulatorFault"] = fault.rawValue }
        if undated { spec["signedDate"] = NSNull() }  // signed with no signedDate, on the payload nor on its transaction
        if let signedDate { spec["signedDate"] = signedDate }
        return try SignedNotifications(chain: chain).body(forSpec: Array(JSONSerialization.data(withJSONObject: spec)))
    }

    static func consumable(_ id: String, world: RunWorld, revokedAt: Int64? = nil) -> [String: Any] {
        var transaction: [String: Any] = [
            "transactionId": id, "originalTransactionId": id, "productId": "coins.100", "type": "Consumable", "quantity": 1,
            "purchaseDate": world.nowMs - 3 * world.dayMs, "originalPurchaseDate": world.nowMs - 3 * world.dayMs,
            "inAppOwnershipType": "PURCHASED", "price": 990, "currency": "EUR",
        ]
        if let revokedAt {
            transaction["revocationDate"] = revokedAt
            transaction["revocationReason"] = 1
        }
        return transaction
    }

    /// The world of the v1 refund test: a finished consumable in the ledger only.
    static func gamer(_ world: RunWorld, cancelled: Bool = false) async throws {
        try await world.addReceipt("gamer", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "90"]]]])
        try await world.connection.execute("""
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                          environment, cancellation_date, cancellation_reason)
            VALUES ('91', 'gamer', '91', 'coins.100', now() - interval '3 days', 1, 'Production',
                    CASE WHEN \(cancelled) THEN now() - interval '1 day' END, CASE WHEN \(cancelled) THEN 1 END)
            """)
    }

    static func ingest(_ world: RunWorld, _ bodies: [String]) async throws -> Int {
        try await NotificationStore(connection: world.connection).insert(bodies: bodies)
    }

    @Test func aV2RefundOfAFinishedConsumableReachesTheLedgerAndTheFinanceCSVWithItsPrice() async throws {
        try await RunWorld.with("v2-refund") { world in
            try await Self.gamer(world)
            let refundedAt = world.nowMs - 3_600_000
            #expect(try await Self.ingest(world, [Self.body("REFUND", transaction: Self.consumable("91", world: world, revokedAt: refundedAt))]) == 1)
            let (summary, _) = try await world.run(Self.options(world))
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
            _ = try await FinanceLedger.forEachEvent(connection: world.connection, from: Date().addingTimeInterval(-86_400),
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
            try await Self.gamer(world)
            _ = try await world.run(Self.options(world))
            let ledger = try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values)
            let refund = Self.consumable("91", world: world, revokedAt: world.nowMs)
            _ = try await Self.ingest(world, [
                try Self.body("REFUND", transaction: refund, fault: .tamperedPayload),
                try Self.body("REFUND", transaction: refund, bundleId: "com.example.other"),
                try Self.body("REFUND", transaction: refund, fault: .expiredLeaf),
            ])
            let (summary, _) = try await world.run(Self.options(world))
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
            try await Self.gamer(world)
            _ = try await world.run(Self.options(world))
            let ledger = try await world.connection.query("SELECT * FROM iap.transactions ORDER BY transaction_id").map(\.values)
            _ = try await Self.ingest(world, [
                try Self.body("REFUND", transaction: Self.consumable("91", world: world, revokedAt: world.nowMs), undated: true),
            ])
            let (summary, _) = try await world.run(Self.options(world))
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
            try await Self.gamer(world)
            _ = try await world.run(Self.options(world))
            let hostile = try Self.body("REFUND", transaction: Self.consumable("91", world: world, revokedAt: world.nowMs),
                                        fault: fault, signedDate: Int64(signedDate)!)
            let refundedAt = world.nowMs - 60_000
            _ = try await Self.ingest(world, [hostile, try Self.body("REFUND", transaction: Self.consumable("91", world: world, revokedAt: refundedAt))])
            let (summary, _) = try await world.run(Self.options(world))
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
            try await Self.gamer(world)
            let jws = String(decoding: try Data(contentsOf: TestPaths.repositoryRoot.appending(
                path: "FuzzTesting/FailCases/jws/jws-crash-0e7de8e114da672f9367c59a30874ac26861d170")), as: UTF8.self)
            let hostile = String(decoding: try JSONSerialization.data(withJSONObject: ["signedPayload": jws]), as: UTF8.self)
            let refundedAt = world.nowMs - 60_000
            _ = try await Self.ingest(world, [hostile, try Self.body("REFUND", transaction: Self.consumable("91", world: world, revokedAt: refundedAt))])
            let (summary, ending) = try await world.run(Self.options(world))
            #expect(ending == .completed)
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            let reasons = try await world.connection.query("SELECT reason FROM iap.notifications WHERE outcome = 'rejected'")
                .map { try $0.decode("reason", as: String.self) }
            #expect(reasons.count == 1 && reasons.first?.hasPrefix("jws_invalid:") == true, "\(reasons)")
        }
    }

    @Test func theSameNotificationStoredTwiceIsProcessedOnce() async throws {
        try await RunWorld.with("v2-once") { world in
            try await Self.gamer(world)
            let body = try Self.body("REFUND", uuid: "6c1b7e0a-0000-4000-8000-000000000091",
                                     transaction: Self.consumable("91", world: world, revokedAt: world.nowMs - 60_000))
            // Apple sends it again: stored once.
            #expect(try await Self.ingest(world, [body, body]) == 1)
            #expect(try await Self.ingest(world, [body]) == 0)
            // The app server kept a copy wrapped differently: stored, and found to be the same notification.
            let signedPayload = try #require(NotificationV2Body.signedPayload(Array(body.utf8)))
            let wrapped = String(decoding: try JSONSerialization.data(withJSONObject: ["signedPayload": signedPayload, "receivedBy": "gateway-2"]), as: UTF8.self)
            #expect(try await Self.ingest(world, [wrapped]) == 1)
            let (summary, _) = try await world.run(Self.options(world))
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            #expect(summary.notifications["v2 REFUND"]?[.duplicate] == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 2)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE notification_uuid = '6c1b7e0a-0000-4000-8000-000000000091'") == 2)
        }
    }

    @Test func aRefundReversalClearsTheRefundOnlyWhenTheSignedTransactionSaysSo() async throws {
        try await RunWorld.with("v2-reversal") { world in
            try await Self.gamer(world, cancelled: true)
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                              environment, cancellation_date, cancellation_reason)
                VALUES ('92', 'gamer', '92', 'coins.100', now() - interval '3 days', 1, 'Production', now() - interval '1 day', 0)
                """)
            let stillRefunded = world.nowMs - world.dayMs
            _ = try await Self.ingest(world, [
                try Self.body("REFUND_REVERSED", transaction: Self.consumable("91", world: world)),
                try Self.body("REFUND_REVERSED", transaction: Self.consumable("92", world: world, revokedAt: stillRefunded)),
            ])
            let (summary, _) = try await world.run(Self.options(world))
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
            _ = try await world.run(Self.options(world))
            let renewal: [String: Any] = [
                "transactionId": "50", "originalTransactionId": "50", "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
                "purchaseDate": world.nowMs - 20 * world.dayMs, "expiresDate": world.nowMs + 10 * world.dayMs,
            ]
            _ = try await Self.ingest(world, [
                try Self.body("TEST", environment: "Sandbox"),
                try Self.body("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", transaction: renewal),
            ])
            let (summary, _) = try await world.run(Self.options(world))
            #expect(summary.notifications["v2 TEST"]?[.recorded] == 1)
            #expect(summary.notifications["v2 DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED"]?[.applied] == 1)
            #expect(summary.accountsProcessed == 1)  // made due and re-verified in the same run
            let markdown = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "summary.md"), encoding: .utf8)
            #expect(markdown.contains("| v2 DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED | 1 |"))
        }
    }
}
