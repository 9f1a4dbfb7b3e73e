import AppStore
import AppStoreModels
import Foundation
import Hashing
@testable import Jobs
import Locking
import Postgres
import Reconciliation
import Storage
import TestSupport
import Testing
import Throttling
@testable import WorldSupport

/// Notification history read in slices (docs/notifications.md, "Notification history: the delta
/// feed"): a window larger than a night's budget is finished over several nights, never begun
/// again from its first page; what Apple no longer serves is said, with its size; and whatever
/// fails on the way, every notification Apple holds is stored once, the watermark never past one
/// that was not.
@Suite struct NotificationHistorySliceTests {
    static let day: Int64 = 86_400_000
    static let appAppleId: Int64 = NotificationHistoryTests.appAppleId

    /// `count` notifications of a subscription nobody here holds, spread evenly over [from, until).
    static func generated(count: Int, fromMs: Int64, untilMs: Int64, environment: String = "Production") -> [String: Any] {
        let transaction: [String: Any] = [
            "transactionId": "70", "originalTransactionId": "70", "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
            "purchaseDate": fromMs - day, "expiresDate": untilMs + 30 * day,
        ]
        return ["count": count, "from_ms": fromMs, "until_ms": untilMs,
                "template": ["notificationType": "DID_CHANGE_RENEWAL_STATUS",
                             "data": ["bundleId": "com.example.app", "environment": environment, "appAppleId": appAppleId, "transactionInfo": transaction]]]
    }

    /// 800 notifications over 20 days (40 a day: two pages of 20 a day-slice) and, last, the
    /// payer's REFUND, with Apple's quota at 4 pages a night: a tenth of the window's 41 pages or
    /// so (the overlap and the run's last minutes add one or two). Each night goes on where the
    /// last stopped: the window is whole by the 12th night, the REFUND applied when it is read;
    /// read from the start each night, as before slices, it never would be.
    /// Left to the plain run: under the thread sanitizer it ran alone for the last 100 s of the suite,
    /// and the feed's steps it repeats twelve times are the sanitized run's in the tests beside it.
    @Test(.disabled(if: isSanitizedRun, "time: the sanitized suite's longest tail; its steps are covered beside it"))
    func aWindowTenNightsLongIsStoredWholeAndItsLastRefundApplied() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let fromMs = (nowMs / 1000) * 1000 - 20 * Self.day
        var scenario = NotificationHistoryTests.scenario(nowMs: nowMs)
        var api = scenario["api"] as! [String: Any]
        api["notification_page_size"] = 20
        api["generated_notifications"] = Self.generated(count: 800, fromMs: fromMs, untilMs: nowMs - 2 * 3_600_000)
        scenario["api"] = api
        scenario["api_quota"] = ["window_seconds": 86_400, "production": ["notification-history": 4.0 / 86_400]]
        try await RunWorld.with("history-ten-nights", now: now, scenario: scenario) { world in
            try await NotificationHistoryTests.payer(world, nowMs: nowMs)
            var options = NotificationHistoryTests.options(world)
            options.notificationHistorySince = Date(ms: fromMs)
            var nights = 0
            var refundedOn: Int?
            while nights < 14 {
                nights += 1
                try await world.simulator.night(nights)
                let (summary, ending) = try await world.run(options, apiBudget: true)
                #expect(ending == .completed)
                let read = try #require(summary.notificationHistory?.first { $0.environment == "Production" })
                #expect(read.pages <= 4, "night \(nights): \(read)")
                #expect(read.stored > 0 || read.complete, "night \(nights) went on where the last stopped: \(read)")
                if refundedOn == nil, summary.notifications["v2 REFUND"]?[.applied] == 1 { refundedOn = nights }
                if read.complete { break }
                #expect(read.error?.contains("429") == true, "night \(nights) stopped at Apple's quota: \(read)")
            }
            #expect(nights >= 10 && nights <= 12, "the window took \(nights) nights at a tenth a night")
            #expect(refundedOn != nil && refundedOn! >= 10, "the REFUND at the window's end, applied on night \(refundedOn.map(String.init) ?? "none")")
            #expect(try await world.entitlements()["payer/pro.monthly"]?.state == .refunded)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 801)
            #expect(try await world.count("SELECT count(DISTINCT notification_uuid) FROM iap.notifications") == 801)
        }
    }

    /// The sandbox keeps 30 days of history, production 180: a sandbox watermark 40 days old is read
    /// from 30 days back (less a margin), and the ten days before are reported as lost to the feed,
    /// with their size, once; the production watermark of the same age is read from itself.
    @Test func whatAppleNoLongerServesIsReportedWithItsSizeAndNotAskedFor() async throws {
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        var scenario = NotificationHistoryTests.scenario(nowMs: nowMs)
        var api = scenario["api"] as! [String: Any]
        api["generated_notifications"] = Self.generated(count: 3, fromMs: nowMs - 29 * Self.day, untilMs: nowMs - 28 * Self.day, environment: "Sandbox")
        scenario["api"] = api
        try await RunWorld.with("history-sandbox-limit", now: now, scenario: scenario) { world in
            try await NotificationHistoryTests.payer(world, nowMs: nowMs)
            let old = now.addingTimeInterval(-40 * 86_400)
            try await world.connection.execute("""
                INSERT INTO iap.notification_history_watermarks (environment, read_until) VALUES ('Production', \(old)), ('Sandbox', \(old))
                """)
            let (summary, _) = try await world.run(NotificationHistoryTests.options(world), apiBudget: true)
            let production = try #require(summary.notificationHistory?.first { $0.environment == "Production" })
            let sandbox = try #require(summary.notificationHistory?.first { $0.environment == "Sandbox" })
            #expect(production.complete && production.unreachableFrom == nil && production.slices == 40, "\(production)")  // 40 days and 1 hour
            #expect(sandbox.complete && sandbox.stored == 3, "\(sandbox)")
            #expect(abs((sandbox.unreachableFrom ?? .distantPast).timeIntervalSince(old.addingTimeInterval(-3600))) < 0.001, "\(sandbox)")
            let served = sandbox.unreachableUntil.map { now.timeIntervalSince($0) } ?? 0
            #expect(served > 29 * 86_400 && served <= 30 * 86_400 - 3600, "the sandbox read from \(served / 86_400) days back")
            #expect(sandbox.from == sandbox.unreachableUntil)
            let report = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "summary.md"), encoding: .utf8)
            #expect(report.contains("**Not readable:** Sandbox from"), "\(report)")
            #expect(report.contains("(10.1 days) is past what Apple serves (30 days)"), "\(report)")
            let watermarks = try await world.connection.query("SELECT environment, read_until FROM iap.notification_history_watermarks")
            #expect(try watermarks.map { try $0.decode("read_until", as: Date?.self) } == [production.to, sandbox.to].map { Optional($0) }
                    || watermarks.map { try $0.decode("read_until", as: Date?.self) } == [sandbox.to, production.to].map { Optional($0) },
                    "each watermark at its read's end")

            // Told once: the next run starts from the watermark.
            let (again, _) = try await world.run(NotificationHistoryTests.options(world), apiBudget: true)
            #expect(again.notificationHistory?.allSatisfy { $0.unreachableFrom == nil && $0.complete } == true, "\(again.notificationHistory ?? [])")
        }
    }

    struct Killed: Error {}

    /// The property: over random 500s, 429s, refused tokens and deaths before a page is stored or
    /// between storing it and keeping where the read stands, read after read, every notification of the window is stored
    /// exactly once, and the watermark never passes one that was not stored.
    @Test func nothingAppleHoldsIsLostOrStoredTwiceWhateverFails() async throws {
        let seed = FuzzSeed("nothingAppleHoldsIsLostOrStoredTwiceWhateverFails")
        var generator = seed.generator
        let now = Date()
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let fromMs = nowMs - 5 * Self.day
        for world in 0..<4 {
            let count = Int.random(in: 10...80, using: &generator)
            let scenario: [String: Any] = [
                "api": [
                    "chains": [:] as [String: Any], "notification_page_size": Int.random(in: 2...7, using: &generator),
                    "generated_notifications": Self.generated(count: count, fromMs: fromMs, untilMs: nowMs - 60_000),
                    "notification_history_faults": ["seed": generator.next() >> 1, "rate": Double.random(in: 0.1...0.5, using: &generator)],
                ] as [String: Any],
            ]
            let killRate = Double.random(in: 0...0.3, using: &generator)
            let killSeed = generator.next()
            try await RunWorld.with("history-property-\(world)", now: now, scenario: scenario) { world in
                let pem = String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/certs/testSigningKey.p8"), as: UTF8.self)
                let credentials = try ServerAPICredentials(issuerId: "issuer", keyId: "KEY", bundleId: "com.example.app", privateKeyPEM: pem)
                let gateway = AppleGateway(concurrency: 2)
                defer { gateway.shutdown() }
                let client = ServerAPIClient(
                    endpoints: .init(production: world.simulator.apiURL, sandbox: world.simulator.sandboxAPIURL),
                    token: ServerAPIToken(credentials: credentials), gateway: gateway,
                    policy: VerificationPolicy(maximumAttempts: 1, backoff: Backoff(base: .milliseconds(1), maximum: .milliseconds(2))), logger: .quiet)
                let kills = Locked(SplitMix64(seed: killSeed))
                var feed = NotificationHistoryFeed(
                    client: client, store: NotificationStore(connection: world.connection), firstSince: Date(ms: fromMs),
                    secretGuard: SharedSecretGuard(limit: 100), logger: .quiet)
                feed.mayDie = { _ in
                    if kills.withLock({ Double($0.next() % 1000) / 1000 < killRate }) { throw Killed() }
                }
                let held = (0..<count).map { ("00000000-0000-4000-9000-" + String(format: "%012d", $0), fromMs + Int64($0) * ((nowMs - 60_000 - fromMs) / Int64(count))) }
                var complete = false
                for _ in 0..<2000 where !complete {
                    do { complete = try await feed.pull(.production, now: now).complete } catch is Killed {}
                    #expect(try await world.count("SELECT count(*) - count(DISTINCT notification_uuid) FROM iap.notifications") == 0, "\(seed)")
                    let watermark = try await world.connection.query(
                        "SELECT read_until FROM iap.notification_history_watermarks WHERE environment = 'Production'"
                    ).first.flatMap { try $0.decode("read_until", as: Date?.self) }
                    let stored = Set(try await world.connection.query("SELECT notification_uuid FROM iap.notifications").map { try $0.decode("notification_uuid", as: String.self) })
                    let passed = held.filter { notification in watermark.map { Date(ms: notification.1) < $0 } ?? false }.filter { !stored.contains($0.0) }
                    #expect(passed.isEmpty, "\(seed): the watermark \(watermark.map { "\($0)" } ?? "none") passed \(passed.map(\.0)) not stored")
                }
                #expect(complete, "\(seed): the window never finished")
                #expect(try await world.count("SELECT count(*) FROM iap.notifications") == count, "\(seed)")
            }
        }
    }
}
