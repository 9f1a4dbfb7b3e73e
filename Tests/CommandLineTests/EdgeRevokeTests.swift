import AppStoreModels
import Foundation
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// No wrong revoke at the edges (docs/guarantees.md, "Entitlement rules"): each case run as a new
/// user runs it, the executable against the simulator answering as Apple writes its answers,
/// every account stored active as an app server stores it. Each of them revoked a paying customer
/// (or kept one who left) before its rule.
@Suite struct EdgeRevokeTests {
    /// An answer as verifyReceipt writes it, times in days from the world's now.
    struct Answer {
        let world: RunWorld

        func ms(_ days: Double) -> String { String(world.nowMs + Int64(days * 86_400_000)) }

        func transaction(_ id: String, _ product: String, original: String, purchased: Double, expires: Double? = nil,
                         cancelled: Double? = nil, upgraded: Bool = false, ownership: String = "PURCHASED") -> [String: Any] {
            var entry: [String: Any] = [
                "quantity": "1", "product_id": product, "transaction_id": id, "original_transaction_id": original,
                "purchase_date_ms": ms(purchased), "original_purchase_date_ms": ms(purchased), "is_trial_period": "false",
                "in_app_ownership_type": ownership,
            ]
            if let expires { entry["expires_date_ms"] = ms(expires) }
            if let cancelled { entry["cancellation_date_ms"] = ms(cancelled); entry["cancellation_reason"] = "0" }
            if upgraded { entry["is_upgraded"] = "true" }
            return entry
        }

        func renewal(original: String?, product: String, autoRenew: Bool = true, grace: Double? = nil, retrying: Bool = false) -> [String: Any] {
            var entry: [String: Any] = [
                "product_id": product, "auto_renew_product_id": product, "auto_renew_status": autoRenew ? "1" : "0",
                "is_in_billing_retry_period": retrying ? "1" : "0",
            ]
            if let original { entry["original_transaction_id"] = original }
            if let grace { entry["grace_period_expires_date_ms"] = ms(grace) }
            return entry
        }

        func spec(latest: [[String: Any]], inApp: [[String: Any]] = [], pending: [[String: Any]] = []) -> [String: Any] {
            ["response": [
                "status": 0, "environment": "Production",
                "receipt": ["bundle_id": "com.example.app", "in_app": inApp],
                "latest_receipt_info": latest, "pending_renewal_info": pending,
            ] as [String: Any]]
        }
    }

    /// A row as an app server stores a paying customer's: active until `expires` days from now.
    static func storeActive(_ world: RunWorld, _ account: String, _ product: String, original: String, expires: Double?) async throws {
        try await world.store(Entitlement(
            accountId: account, productId: product, originalTransactionId: original, latestTransactionId: original, state: .active,
            expiresAt: expires.map { world.expiry(endDays: $0) }, environment: "Production", ownershipType: "PURCHASED"))
    }

    static func run(_ world: RunWorld, _ arguments: [String] = ["run"]) async throws {
        let result = try await CLIProcess.run(arguments + ["--report-dir", world.reportRoot.appending(path: UUID().uuidString).path],
                                              environment: RunWorld.environment(world))
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test func theEdgesEndToEnd() async throws {
        try await RunWorld.with("edges") { world in
            let apple = Answer(world: world)
            try await world.catalog(["pro.monthly": .autoRenewable, "pro.yearly": .autoRenewable, "premium": .autoRenewable,
                                     "basic": .autoRenewable])
            try await world.connection.execute("INSERT INTO iap.products (product_id, type, duration) VALUES ('season', 'non_renewing', '30 days')")

            // 1. The customer's own renewing chain beside a family copy of the same product, revoked yesterday.
            try await world.addReceipt("two-chains", spec: apple.spec(
                latest: [apple.transaction("100", "pro.monthly", original: "100", purchased: -55, expires: -25),
                         apple.transaction("101", "pro.monthly", original: "100", purchased: -25, expires: 5),
                         apple.transaction("900", "pro.monthly", original: "900", purchased: -3, expires: 27, cancelled: -1,
                                           ownership: "FAMILY_SHARED")],
                pending: [apple.renewal(original: "100", product: "pro.monthly"),
                          apple.renewal(original: "900", product: "pro.monthly", autoRenew: false)]))
            try await Self.storeActive(world, "two-chains", "pro.monthly", original: "100", expires: 5)
            // 2. A 30-day pass bought 10 days ago; a second one bought 5 days ago, refunded the next day.
            try await world.addReceipt("passes", spec: apple.spec(latest: [], inApp: [
                apple.transaction("300", "season", original: "300", purchased: -10),
                apple.transaction("301", "season", original: "301", purchased: -5, cancelled: -4)]))
            try await Self.storeActive(world, "passes", "season", original: "301", expires: 25)
            // 3. One Apple ID on two devices: the same renewal entry, without original_transaction_id, in both answers.
            for _ in 0..<2 {
                try await world.addReceipt("two-devices", spec: apple.spec(
                    latest: [apple.transaction("200", "pro.monthly", original: "200", purchased: -32, expires: -2)],
                    pending: [apple.renewal(original: nil, product: "pro.monthly", grace: 5, retrying: true)]))
            }
            try await Self.storeActive(world, "two-devices", "pro.monthly", original: "200", expires: 28)
            // 4. Upgraded away, with is_upgraded and no cancellation date; the upgrade itself refunded.
            try await world.addReceipt("upgraded", spec: apple.spec(
                latest: [apple.transaction("400", "pro.yearly", original: "400", purchased: -65, expires: 300, upgraded: true),
                         apple.transaction("401", "premium", original: "400", purchased: -64, expires: -34, cancelled: -60)],
                pending: [apple.renewal(original: "400", product: "premium", autoRenew: false)]))
            try await Self.storeActive(world, "upgraded", "pro.yearly", original: "400", expires: 300)
            // 5. Downgraded at renewal: premium ended 10 days ago, basic took over and is in its grace period.
            try await world.addReceipt("downgraded", spec: apple.spec(
                latest: [apple.transaction("500", "premium", original: "500", purchased: -40, expires: -10),
                         apple.transaction("501", "basic", original: "500", purchased: -10, expires: -1)],
                pending: [apple.renewal(original: "500", product: "basic", grace: 5, retrying: true)]))
            try await Self.storeActive(world, "downgraded", "premium", original: "500", expires: 20)

            try await Self.run(world)
            let rows = try await world.entitlements()
            #expect(rows["two-chains/pro.monthly"]?.state == .active)
            #expect(rows["two-chains/pro.monthly"]?.latestTransactionId == "101")
            #expect(rows["passes/season"]?.state == .active)
            #expect(rows["passes/season"]?.expiresAt == world.expiry(endDays: 20))
            #expect(rows["two-devices/pro.monthly"]?.state == .gracePeriod)
            #expect(rows["two-devices/pro.monthly"]?.gracePeriodExpiresAt == world.expiry(endDays: 5))
            #expect(rows["upgraded/pro.yearly"]?.state == .upgraded)
            #expect(rows["upgraded/pro.yearly"]?.entitled == false)
            #expect(rows["downgraded/premium"]?.state == .expired)
            #expect(rows["downgraded/basic"]?.state == .gracePeriod)
            // What was revoked, and nothing else: the customer who left, and the product left behind.
            let revoked = try await world.connection.query("""
                SELECT account_id || '/' || product_id AS revoked FROM iap.corrections WHERE kind = 'revoke' ORDER BY 1
                """).map { try $0.decode("revoked", as: String.self) }
            #expect(revoked == ["downgraded/premium", "upgraded/pro.yearly"])
        }
    }

    /// A product neither the catalog nor Apple's signed data types is reported and left as
    /// stored: never lifetime access from a guess, never a revoke.
    @Test func anUntypedProductIsReportedAndLeftAsStored() async throws {
        try await RunWorld.with("untyped") { world in
            let apple = Answer(world: world)
            try await world.addReceipt("buyer", spec: apple.spec(latest: [], inApp: [apple.transaction("1", "mystery", original: "1", purchased: -3)]))
            try await world.addReceipt("keeper", spec: apple.spec(latest: [], inApp: [apple.transaction("2", "mystery", original: "2", purchased: -3)]))
            try await Self.storeActive(world, "keeper", "mystery", original: "9", expires: nil)
            // Refunded, every purchase of it: a refund ends a purchase whatever its type.
            try await world.addReceipt("refunded", spec: apple.spec(latest: [], inApp: [
                apple.transaction("3", "mystery", original: "3", purchased: -3, cancelled: -1)]))
            try await Self.storeActive(world, "refunded", "mystery", original: "3", expires: nil)
            let report = world.reportRoot.appending(path: "untyped")
            let result = try await CLIProcess.run(["run", "--report-dir", report.path], environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("products left as stored"), "\(result.stdout)")
            #expect(try await world.entitlements().keys.sorted() == ["keeper/mystery", "refunded/mystery"])
            #expect(try await world.entitlements()["keeper/mystery"]?.entitled == true)
            #expect(try await world.entitlements()["refunded/mystery"]?.state == .refunded)
            let summary = try String(contentsOf: report.appending(path: "summary.md"), encoding: .utf8)
            #expect(summary.contains("account buyer, product mystery: neither the catalog nor Apple's signed type says what this product is"))
        }
    }

    /// A refund notification makes every account holding the original transaction due: one
    /// Apple ID's purchase restored under two app accounts is revoked for both.
    @Test func aRefundNotificationMakesEveryHolderDue() async throws {
        try await RunWorld.with("holders") { world in
            let apple = Answer(world: world)
            try await world.catalog(["pro.monthly": .autoRenewable])
            let refunded = apple.spec(
                latest: [apple.transaction("700", "pro.monthly", original: "700", purchased: -10, expires: 20, cancelled: -0.1)],
                pending: [apple.renewal(original: "700", product: "pro.monthly", autoRenew: false)])
            for account in ["alice", "bob"] {
                try await world.addReceipt(account, spec: refunded)
                try await Self.storeActive(world, account, "pro.monthly", original: "700", expires: 20)
            }
            // Both were verified yesterday: neither is due tonight but through the notification.
            try await world.connection.execute("UPDATE iap.app_receipts SET last_verified_at = now() - interval '1 hour', last_outcome = 'verified'")
            try await V1Notifications.store(world, [V1Notifications.notification(
                "REFUND", password: world.secret, original: "700",
                transactions: [apple.transaction("700", "pro.monthly", original: "700", purchased: -10, expires: 20, cancelled: -0.1)])])
            try await Self.run(world, ["backfill", "--notifications-only"])
            let rows = try await world.entitlements()
            #expect(rows["alice/pro.monthly"]?.state == .refunded)
            #expect(rows["bob/pro.monthly"]?.state == .refunded)
        }
    }
}
