import AppStoreModels
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import TestSupport
import Testing
@testable import WorldSupport

/// Nothing Apple sent is lost to a rejection (docs/notifications.md, "Rejected for the app's
/// configuration"): a notification a check of the app's configuration refused is examined again
/// once the configuration changes; a forged body stays rejected, and does not keep Apple's own copy
/// of the same notificationUUID out.
@Suite struct RejectedNotificationTests {
    /// A day of Apple's notifications refused for a wrong bundle id: stored, rejected, and applied
    /// the first night the bundle id is right; a forged one beside it is not examined again until
    /// `--retry-rejected` asks, and is rejected again.
    @Test func aNotificationRefusedForAWrongBundleIdIsAppliedOnceTheIdIsFixed() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        try await RunWorld.with("rejected-configuration", now: now, scenario: NotificationHistoryTests.scenario(nowMs: nowMs)) { world in
            try await NotificationHistoryTests.payer(world, nowMs: nowMs)
            let forged = try V2Notifications.body("REFUND", uuid: "00000000-0000-4000-8000-0000000000f0", transaction: [
                "transactionId": "60", "originalTransactionId": "60", "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
                "purchaseDate": nowMs - 5 * world.dayMs, "revocationDate": nowMs - 60_000, "revocationReason": 0,
            ])  // signed by a chain this world does not trust
            #expect(try await V2Notifications.ingest(world, [forged]) == 1)

            var wrong = NotificationHistoryTests.options(world)
            wrong.bundleIds = ["com.example.wrong"]
            let (first, _) = try await world.run(wrong, apiBudget: true)
            #expect(first.notifications["v2 (unverified)"]?[.rejected] == 2, "\(first.notifications)")
            #expect(try await world.entitlements()["payer/pro.monthly"]?.state == .active)
            let refusedFor = try await world.connection.query(
                "SELECT rejected_configuration FROM iap.notifications WHERE notification_uuid = '00000000-0000-4000-8000-000000000060'")
            #expect(try refusedFor.first?.decode("rejected_configuration", as: String?.self) == "bundle_ids=com.example.wrong;app_apple_id=1234")
            #expect(try await world.count("""
                SELECT count(*) FROM iap.notifications WHERE notification_uuid = '00000000-0000-4000-8000-0000000000f0' AND rejected_configuration IS NULL
                """) == 1, "a forged body is no configuration's fault")

            // The bundle id fixed: the refused notification is examined again and applied; the forged one is not.
            let (fixed, _) = try await world.run(NotificationHistoryTests.options(world), apiBudget: true)
            #expect(fixed.notificationsReexamined == 1)
            #expect(fixed.notifications["v2 REFUND"]?[.applied] == 1, "\(fixed.notifications)")
            #expect(try await world.entitlements()["payer/pro.monthly"]?.state == .refunded)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE outcome = 'rejected'") == 1)

            // Nothing more to examine under the same configuration.
            let (same, _) = try await world.run(NotificationHistoryTests.options(world), apiBudget: true)
            #expect(same.notificationsReexamined == nil)

            // On demand: the forged one too, which is rejected again.
            var retry = NotificationHistoryTests.options(world)
            retry.retriesRejected = true
            let (retried, _) = try await world.run(retry, apiBudget: true)
            #expect(retried.notificationsReexamined == 1)
            #expect(retried.notifications["v2 (unverified)"]?[.rejected] == 1, "\(retried.notifications)")
            #expect(try await world.entitlements()["payer/pro.monthly"]?.state == .refunded)
        }
    }

    /// A forged body posted with a real notification's UUID before Apple's copy arrived: the run
    /// processes what is stored before it reads the history, so the forged body is rejected first,
    /// and Apple's copy from the notification history is stored beside it and applied, that night.
    @Test func aForgedBodyWithARealNotificationsUUIDDoesNotKeepApplesCopyOut() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        try await RunWorld.with("rejected-squatter", now: now, scenario: NotificationHistoryTests.scenario(nowMs: nowMs)) { world in
            try await NotificationHistoryTests.payer(world, nowMs: nowMs)
            let squatter = try V2Notifications.body("TEST", uuid: "00000000-0000-4000-8000-000000000060")  // an untrusted chain
            #expect(try await V2Notifications.ingest(world, [squatter]) == 1)

            let (summary, _) = try await world.run(NotificationHistoryTests.options(world), apiBudget: true)
            let read = try #require(summary.notificationHistory?.first { $0.environment == "Production" })
            #expect(read.stored == 1, "\(read)")
            #expect(summary.notifications["v2 REFUND"]?[.applied] == 1, "\(summary.notifications)")
            #expect(try await world.entitlements()["payer/pro.monthly"]?.state == .refunded)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 2)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE outcome = 'rejected'") == 1)
        }
    }
}
