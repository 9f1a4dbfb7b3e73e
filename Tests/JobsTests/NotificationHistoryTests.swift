import AppStore
import AppStoreModels
import Foundation
import Jobs
import Postgres
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// Get Notification History as the delta feed (docs/notifications.md, "Notification history: the
/// delta feed"): a notification the app server never stored still reaches the ledger and makes its
/// account due the same night; a slice left halfway is taken up at its paginationToken; reading a
/// window again stores nothing twice.
@Suite struct NotificationHistoryTests {
    static let day: Int64 = 86_400_000
    static let appAppleId: Int64 = 1234

    /// A subscriber whose refund Apple notified (REFUND, a V2 notification signed half an hour ago),
    /// and whose subscription the API shows refunded.
    static func scenario(nowMs: Int64, notifications: Int = 1) -> [String: Any] {
        let refundedAt = nowMs - 3 * 3_600_000
        let transaction: [String: Any] = [
            "transactionId": "60", "originalTransactionId": "60", "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
            "purchaseDate": nowMs - 5 * day, "expiresDate": nowMs + 25 * day, "revocationDate": refundedAt, "revocationReason": 1,
        ]
        let specs: [[String: Any]] = (0..<notifications).map { index in
            ["notificationType": index == 0 ? "REFUND" : "DID_CHANGE_RENEWAL_STATUS", "signedDate": nowMs - 1_800_000 + Int64(index) * 1000,
             "notificationUUID": "00000000-0000-4000-8000-00000000006\(index)",
             "data": ["bundleId": "com.example.app", "environment": "Production", "appAppleId": appAppleId, "transactionInfo": transaction]]
        }
        return ["api": [
            "chains": ["60": ["environment": "Production", "transactions": [transaction],
                              "renewal": ["autoRenewStatus": 0, "autoRenewProductId": "pro.monthly"]]],
            "notifications": specs, "notification_page_size": 1,
        ]]
    }

    /// The nightly run, verifying through the Server API, reading notification history from a day back.
    static func options(_ world: RunWorld) -> RunOptions {
        var options = world.options()
        options.sources = .serverAPI
        options.bundleIds = ["com.example.app"]
        options.appAppleId = appAppleId
        options.appleRootCertificates = [world.simulator.signingRoot]
        options.readsNotificationHistory = true
        options.notificationHistorySince = world.now.addingTimeInterval(-86_400)
        return options
    }

    /// A paying subscriber, verified an hour ago: not due tonight but for a notification.
    static func payer(_ world: RunWorld, nowMs: Int64) async throws {
        try await world.addReceipt("payer", spec: ["generate": ["subscriptions": [world.subscription(original: "60", renewals: 0, endDays: 25)]]])
        try await world.store(Entitlement(accountId: "payer", productId: "pro.monthly", originalTransactionId: "60", latestTransactionId: "60",
                                          state: .active, expiresAt: Date(ms: nowMs + 25 * day), autoRenew: true, environment: "Production"))
        try await world.connection.execute("UPDATE iap.app_receipts SET last_verified_at = now() - interval '1 hour'")
    }

    @Test func aRefundTheAppServerMissedIsRevokedTheSameNight() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        try await RunWorld.with("notification-history", now: now, scenario: Self.scenario(nowMs: nowMs)) { world in
            try await Self.payer(world, nowMs: nowMs)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 0)  // the app server stored nothing
            // One the app server did store, of a purchase no account holds yet: unmatched, left due.
            try await V1Notifications.store(world, [V1Notifications.notification("DID_CHANGE_RENEWAL_STATUS", password: world.secret, original: "99")])

            let (summary, ending) = try await world.run(Self.options(world), apiBudget: true)
            #expect(ending == .completed)
            // Processed once, before the history; the pass after it takes only what the history added.
            #expect(summary.notifications["DID_CHANGE_RENEWAL_STATUS"]?[.unmatched] == 1, "\(summary.notifications)")
            let production = try #require(summary.notificationHistory?.first { $0.environment == "Production" })
            #expect(production.complete && production.received == 1 && production.stored == 1, "\(production)")
            #expect(production.from == Self.second(now.addingTimeInterval(-86_400)))
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1)
            #expect(summary.accountsProcessed == 1)  // made due by the notification, verified the same night
            #expect(summary.corrections["revoke"] == 1)
            let row = try #require(try await world.entitlements()["payer/pro.monthly"])
            #expect(row.state == .refunded && row.refundedAt == Date(ms: nowMs - 3 * 3_600_000))
            #expect(summary.apiRequests?[ServerAPIEndpointKey(.notificationHistory, .production)]?.requests == 1)
            // The watermark is where the window ended.
            let watermark = try await world.connection.query(
                "SELECT read_until FROM iap.notification_history_watermarks WHERE environment = 'Production'")
            #expect(try watermark.first?.decode("read_until", as: Date.self) != nil)

            // The next run reads from the watermark, less an hour's overlap: the same notification
            // comes again and is stored no second time; nothing more is done.
            let (again, _) = try await world.run(Self.options(world), apiBudget: true)
            let reread = try #require(again.notificationHistory?.first { $0.environment == "Production" })
            #expect(reread.complete && reread.received == 1 && reread.stored == 0, "\(reread)")
            #expect(reread.from > now.addingTimeInterval(-2 * 3600), "read from the watermark: \(reread.from)")
            #expect(again.accountsProcessed == 0 && again.notifications.keys.sorted() == ["DID_CHANGE_RENEWAL_STATUS"])
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 2)
        }
    }

    /// A window whose second page failed (Apple's quota, with a Retry-After longer than a run
    /// waits) keeps what it stored and the token of the page it did not get, not the watermark:
    /// the next run asks for that page, not the window's first again.
    @Test func aSliceLeftHalfwayIsTakenUpAtItsPaginationToken() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        var limited = Self.scenario(nowMs: nowMs, notifications: 2)
        limited["api_quota"] = ["window_seconds": 3600, "production": ["notification-history": 1.0 / 3600]]  // one page an hour
        try await RunWorld.with("notification-history-partial", now: now, scenario: limited) { world in
            try await Self.payer(world, nowMs: nowMs)
            var options = Self.options(world)
            options.policy.maximumAttempts = 2
            let (first, _) = try await world.run(options, apiBudget: true)
            let partial = try #require(first.notificationHistory?.first { $0.environment == "Production" })
            #expect(!partial.complete && partial.pages == 1 && partial.stored == 1 && partial.slices == 0, "\(partial)")
            #expect(partial.error?.contains("429") == true, "\(partial)")
            let kept = try await world.connection.query(
                "SELECT read_until, pagination_token FROM iap.notification_history_watermarks WHERE environment = 'Production'")
            #expect(try kept.first?.decode("read_until", as: Date?.self) == nil)
            #expect(try kept.first?.decode("pagination_token", as: String?.self) == "n-1")

            // Apple answers again (another simulator, the same world and signing chain, no quota).
            var open = Self.scenario(nowMs: nowMs, notifications: 2)
            open["api_quota"] = nil
            let apple = try SimulatorProcess(scenario: open, arguments: ["--signing-dir", world.simulator.signingDirectory.path])
            defer { apple.stop() }
            try await Task.sleep(for: .milliseconds(1_100))  // slices are whole seconds: this run's start is a later one
            let (second, _) = try await world.run(options, apple: apple, apiBudget: true)
            let whole = try #require(second.notificationHistory?.first { $0.environment == "Production" })
            // The page the first run did not get (its notification is the one not stored yet), then
            // the slice after it from an hour before its end (the overlap): both notifications again,
            // neither stored twice.
            #expect(whole.resumed && whole.complete && whole.pages == 3 && whole.received == 3 && whole.stored == 1, "\(whole)")
            #expect(whole.from == Self.second(now.addingTimeInterval(-86_400)), "the same slice")
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 2)
            let watermark = try await world.connection.query(
                "SELECT read_until, pagination_token FROM iap.notification_history_watermarks WHERE environment = 'Production'")
            #expect(try watermark.first?.decode("read_until", as: Date?.self) == whole.to)
            #expect(try watermark.first?.decode("pagination_token", as: String?.self) == nil)
        }
    }

    /// `date` on its whole second, as the slices are.
    static func second(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }
}
