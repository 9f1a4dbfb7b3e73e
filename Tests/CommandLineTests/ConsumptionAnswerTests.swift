import AppleSimulator
import Foundation
import HTTP
import Postgres
import Testing
import TestSupport
@testable import WorldSupport

/// `answer-consumption-requests` end to end (docs/consumption.md): the executable against real
/// PostgreSQL and the simulator, whose Send Consumption Information checks each body as Apple
/// does and keeps what it received. Each expected body is written here by hand from the rules.
@Suite struct ConsumptionAnswerTests {
    static let hour: Int64 = 3_600_000

    /// A signed CONSUMPTION_REQUEST for `transaction`, asked `hoursAgo` ago.
    static func request(_ transaction: [String: Any], hoursAgo: Double = 1, uuid: String = UUID().uuidString.lowercased(),
                        reason: String = "UNINTENDED_PURCHASE") throws -> String {
        let signedDate = Int64(Date().timeIntervalSince1970 * 1000) - Int64(hoursAgo * Double(hour))
        let spec: [String: Any] = [
            "notificationType": "CONSUMPTION_REQUEST", "notificationUUID": uuid, "signedDate": signedDate,
            "data": ["bundleId": "com.example.app", "environment": "Production", "appAppleId": V2Notifications.appAppleId,
                     "consumptionRequestReason": reason, "transactionInfo": transaction],
        ]
        return try SignedNotifications(chain: V2Notifications.chain).body(forSpec: Array(JSONSerialization.data(withJSONObject: spec)))
    }

    static func transaction(_ id: String, product: String = "coins.100", type: String = "Consumable", extra: [String: Any] = [:]) -> [String: Any] {
        var transaction: [String: Any] = [
            "transactionId": id, "originalTransactionId": id, "productId": product, "type": type, "quantity": 1,
            "purchaseDate": Int64(Date().timeIntervalSince1970 * 1000) - 3 * 24 * hour, "inAppOwnershipType": "PURCHASED",
        ]
        transaction.merge(extra) { $1 }
        return transaction
    }

    /// A ledger row of `account`.
    static func ledger(_ world: RunWorld, _ account: String, _ id: String, product: String = "coins.100", original: String? = nil,
                       group: String? = nil, trial: Bool = false, revoked: Bool = false) async throws {
        try await world.connection.execute("""
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                          environment, subscription_group_identifier, is_trial_period, cancellation_date)
            VALUES (\(id), \(account), \(original ?? id), \(product), now() - interval '3 days', 1, 'Production', \(group), \(trial),
                    CASE WHEN \(revoked) THEN now() - interval '1 day' END)
            """)
    }

    static func consent(_ world: RunWorld, _ account: String, _ consented: Bool, preference: String? = nil) async throws {
        try await world.connection.execute("""
            INSERT INTO iap.consumption_consent (account_id, consented, refund_preference) VALUES (\(account), \(consented), \(preference))
            """)
    }

    /// The CLI's environment: the App Store Connect key, the simulator's API, the app's identity.
    static func environment(_ world: RunWorld, key: URL) -> [String: String] {
        APIWorld.environment(world, key: key).merging(["APPSTORE_APP_APPLE_ID": String(V2Notifications.appAppleId)]) { $1 }
    }

    static func answer(_ world: RunWorld, _ extra: [String] = [], environment: [String: String] = [:]) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
        let root = world.reportRoot.appending(path: "root.der")
        try Data(V2Notifications.chain.root).write(to: root)
        let simulatorRoot = world.reportRoot.appending(path: "simulator-root.der")
        try Data(world.simulator.signingRoot).write(to: simulatorRoot)
        let key = try Fixtures.privateKey(at: world.reportRoot.appending(path: "key.p8"))
        return try await CLIProcess.run(
            ["answer-consumption-requests", "--apple-root-certificate", root.path, "--apple-root-certificate", simulatorRoot.path] + extra,
            environment: Self.environment(world, key: key).merging(environment) { $1 })
    }

    /// What the simulated Send Consumption Information received, in order.
    static func received(_ world: RunWorld) async throws -> [(transaction: String, body: String, status: Int)] {
        try await V2Notifications.consumptionReceived(world)
    }

    static func outcomes(_ world: RunWorld) async throws -> [String: String] {
        var result: [String: String] = [:]
        for row in try await world.connection.query("SELECT transaction_id, outcome, notification_uuid FROM iap.consumption_answers") {
            result[try row.decode("notification_uuid", as: String.self)] = try row.decode("outcome", as: String.self)
        }
        return result
    }

    /// Every outcome in one run: sent (after a 429 and a 500), no_consent (no row; consented
    /// false), past_deadline, refused (Apple's 4000209), unmatched, advanced_commerce,
    /// answered_already, and a forged request that is recorded nowhere and sends nothing.
    @Test func everyOutcomeOfOneRun() async throws {
        let scenario: [String: Any] = ["api": ["consumption": [
            "types": ["95": "Auto-Renewable Subscription"],
            "faults": ["91": [["http": 429, "retry_after_ms": 300], ["http": 500, "error_code": 5000000]]],
        ]]]
        try await RunWorld.with("consumption-outcomes", scenario: scenario) { world in
            try await world.addReceipt("gamer", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "90"]]]])
            for (account, id) in [("gamer", "91"), ("quiet", "92"), ("declined", "93"), ("late", "94"), ("mislabelled", "95"), ("merchant", "96")] {
                try await Self.ledger(world, account, id)
            }
            try await Self.consent(world, "gamer", true)
            try await Self.consent(world, "declined", false, preference: "DECLINE")
            try await Self.consent(world, "late", true)
            try await Self.consent(world, "mislabelled", true)
            try await Self.consent(world, "merchant", true)
            // Signed as a consumable, known to Apple as a subscription: the app's percentage is refused.
            try await world.connection.execute("INSERT INTO iap.consumption_usage (transaction_id, consumption_percentage) VALUES ('95', 25000)")
            let uuids = (0..<9).map { "req-\($0)" }
            let bodies = [
                try Self.request(Self.transaction("91"), uuid: uuids[0]),
                try Self.request(Self.transaction("92"), uuid: uuids[1]),
                try Self.request(Self.transaction("93"), uuid: uuids[2]),
                try Self.request(Self.transaction("94"), hoursAgo: 12.5, uuid: uuids[3]),
                try Self.request(Self.transaction("95"), uuid: uuids[4]),
                try Self.request(Self.transaction("999"), uuid: uuids[5]),
                try Self.request(Self.transaction("96", extra: ["advancedCommerceInfo": ["requestReferenceId": "r-1"]]), uuid: uuids[6]),
                // A second request for 91, after the first: the transaction is answered once in 12 hours.
                try Self.request(Self.transaction("91"), hoursAgo: 0.5, uuid: uuids[7], reason: "OTHER"),
                ForgedBodyTests.forgedBody(original: "91"),
            ]
            #expect(try await V2Notifications.ingest(world, bodies) == bodies.count)

            let result = try await ConsumptionAnswerTests.answer(world)
            #expect(result.status == 0, "\(result.stderr.suffix(1500))")
            #expect(try await Self.outcomes(world) == [
                uuids[0]: "sent", uuids[1]: "no_consent", uuids[2]: "no_consent", uuids[3]: "past_deadline", uuids[4]: "refused",
                uuids[5]: "unmatched", uuids[6]: "advanced_commerce", uuids[7]: "answered_already",
            ])
            // Apple saw the 429, the 500 and the accepted body for 91, and the refused body for 95: nothing else.
            let received = try await Self.received(world)
            let delivered = #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#
            #expect(received.map(\.transaction) == ["91", "91", "91", "95"])
            #expect(received.map(\.status) == [429, 500, 202, 400])
            #expect(received[2].body == delivered)
            #expect(received[3].body == #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":25000}"#)
            let refused = try await world.connection.query("""
                SELECT http_status, error_code, body FROM iap.consumption_answers WHERE transaction_id = '95'
                """)[0]
            #expect(try refused.decode("http_status", as: Int?.self) == 400)
            #expect(try refused.decode("error_code", as: Int64?.self) == 4_000_209)
            let sent = try await world.connection.query("""
                SELECT http_status, body, reason, account_id, attempts FROM iap.consumption_answers WHERE notification_uuid = 'req-0'
                """)[0]
            #expect(try sent.decode("http_status", as: Int?.self) == 202)
            #expect(try sent.decode("body", as: String?.self) == delivered)  // recorded as sent, byte for byte
            #expect(try sent.decode("reason", as: String?.self) == "UNINTENDED_PURCHASE")
            #expect(try sent.decode("account_id", as: String?.self) == "gamer")
            // The forged request: rejected and recorded nowhere; every other notification examined once,
            // the forged one left to be examined again (a fixable configuration may be what refused it).
            #expect(result.stdout.contains("not verified: 1"), "\(result.stdout)")
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE consumption_examined_at IS NULL") == 1)

            // explain shows the account's requests and answers, newest first.
            let text = try await ExplainTests.explain(world, ["gamer"])
            #expect(text.status == 0, "\(text.stderr)")
            let section = text.stdout.components(separatedBy: "Refund questions (CONSUMPTION_REQUEST)").last ?? ""
            #expect(section.contains("answered_already") && section.contains("sent") && section.contains("HTTP 202"), "\(section)")
            #expect(section.contains(delivered), "\(section)")
            let json = try await ExplainTests.explain(world, ["gamer", "--json"])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            let answers = try #require(object["consumption_requests"] as? [[String: Any]])
            #expect(answers.map { $0["outcome"] as? String } == ["answered_already", "sent"])
            #expect(answers.map { $0["reason"] as? String } == ["OTHER", "UNINTENDED_PURCHASE"])
            #expect(answers[1]["body"] as? String == delivered && answers[1]["http_status"] as? Int == 202)

            // A second run finds nothing new and sends nothing.
            let again = try await ConsumptionAnswerTests.answer(world)
            #expect(again.status == 0, "\(again.stderr.suffix(800))")
            #expect(try await Self.received(world).count == 4)
            #expect(again.stdout.contains("requests found: 0"), "\(again.stdout)")
        }
    }

    /// The body for each kind of product, from the ledger and the app's usage: a trial of the
    /// subscription group makes `sampleContentProvided` true; a percentage is never sent for an
    /// auto-renewable subscription; a revoked purchase was delivered all the same (a refund does
    /// not undo a delivery); the default preference.
    @Test func theBodyOfEachKindOfProduct() async throws {
        try await RunWorld.with("consumption-bodies") { world in
            try await Self.ledger(world, "reader", "201", product: "book.1")
            try await Self.ledger(world, "reader", "202", product: "coins.500")
            try await Self.ledger(world, "reader", "301", product: "pro.monthly", original: "300", group: "g1", trial: true)
            try await Self.ledger(world, "reader", "302", product: "pro.monthly", original: "300", group: "g1")
            try await Self.ledger(world, "reader", "401", product: "season.pass")
            try await Self.ledger(world, "reader", "402", product: "coins.100", revoked: true)
            try await Self.consent(world, "reader", true)
            try await world.connection.execute("""
                INSERT INTO iap.consumption_usage (transaction_id, consumption_percentage, delivery_status) VALUES
                    ('202', 60000, NULL), ('302', 50000, NULL), ('401', 30000, 'UNDELIVERED_QUALITY_ISSUE')
                """)
            let bodies = [
                try Self.request(Self.transaction("201", product: "book.1", type: "Non-Consumable"), hoursAgo: 6),
                try Self.request(Self.transaction("202", product: "coins.500"), hoursAgo: 5),
                try Self.request(Self.transaction("302", product: "pro.monthly", type: "Auto-Renewable Subscription",
                                                  extra: ["originalTransactionId": "300", "subscriptionGroupIdentifier": "g1"]), hoursAgo: 4),
                try Self.request(Self.transaction("401", product: "season.pass", type: "Non-Renewing Subscription"), hoursAgo: 3),
                try Self.request(Self.transaction("402"), hoursAgo: 2),
            ]
            _ = try await V2Notifications.ingest(world, bodies)
            let result = try await ConsumptionAnswerTests.answer(world, ["--refund-preference", "DECLINE"])
            #expect(result.status == 0, "\(result.stderr.suffix(1500))")
            let received = try await Self.received(world)
            #expect(received.map(\.transaction) == ["201", "202", "302", "401", "402"])  // the oldest request first
            #expect(received.allSatisfy { $0.status == 202 }, "\(received)")
            #expect(received.map(\.body) == [
                #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"DECLINE"}"#,
                #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":60000,"refundPreference":"DECLINE"}"#,
                #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":true,"refundPreference":"DECLINE"}"#,
                #"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_QUALITY_ISSUE","sampleContentProvided":false,"consumptionPercentage":0,"refundPreference":"DECLINE"}"#,
                #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"DECLINE"}"#,
            ])
            let notes = try await world.connection.query("SELECT detail FROM iap.consumption_answers WHERE transaction_id IN ('302', '401') ORDER BY transaction_id")
                .map { try $0.decode("detail", as: String?.self) }
            #expect(notes == ["consumptionPercentage left out: never for an auto-renewable subscription", "consumptionPercentage sent as 0: not delivered"])
        }
    }

    /// Killed after the answer is recorded `sending` and before its request leaves: the next run
    /// never sends it (it ends `failed`: Apple may have it), and sends the other one it recorded.
    @Test func aKillBetweenRecordAndSendAnswersNothingTwice() async throws {
        try await RunWorld.with("consumption-kill") { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.ledger(world, "gamer", "92")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [
                try Self.request(Self.transaction("91"), hoursAgo: 2, uuid: "first"),
                try Self.request(Self.transaction("92"), hoursAgo: 1, uuid: "second"),
            ])
            let killed = try await ConsumptionAnswerTests.answer(world, environment: ["RR_TEST_DIE_ON_CONSUMPTION_SEND": "91"])
            #expect(killed.status != 0)
            #expect(try await Self.outcomes(world) == ["first": "sending", "second": "pending"])
            #expect(try await Self.received(world).isEmpty)

            let rerun = try await ConsumptionAnswerTests.answer(world)
            #expect(rerun.status == 0, "\(rerun.stderr.suffix(800))")
            #expect(try await Self.outcomes(world) == ["first": "failed", "second": "sent"])
            #expect(try await Self.received(world).map(\.transaction) == ["92"])
            #expect(rerun.stdout.contains("failed 1"), "\(rerun.stdout)")
        }
    }

    /// `--dry-run` prints each body, asks Apple nothing, and records nothing: a real run afterwards
    /// finds the request as new.
    @Test func aDryRunPrintsTheBodiesAndSendsAndRecordsNothing() async throws {
        try await RunWorld.with("consumption-dry") { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Self.request(Self.transaction("91"))])
            let dry = try await ConsumptionAnswerTests.answer(world, ["--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr.suffix(800))")
            #expect(dry.stdout.contains(#"transaction 91 (account gamer): {"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#),
                    "\(dry.stdout)")
            #expect(dry.stdout.contains("dry run"))
            #expect(try await Self.received(world).isEmpty)
            #expect(try await world.count("SELECT count(*) FROM iap.consumption_answers") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE consumption_examined_at IS NOT NULL") == 0)
            #expect(try await ConsumptionAnswerTests.answer(world).status == 0)
            #expect(try await Self.received(world).map(\.status) == [202])
        }
    }

    /// A request only Apple's notification history has (the app server never stored it) is read,
    /// filtered to CONSUMPTION_REQUEST, stored and answered in the same run.
    @Test func aRequestOnlyInNotificationHistoryIsAnswered() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let spec: (String, String) -> [String: Any] = { type, uuid in [
            "notificationType": type, "notificationUUID": uuid, "signedDate": now - Self.hour,
            "data": ["bundleId": "com.example.app", "environment": "Production", "appAppleId": V2Notifications.appAppleId,
                     "transactionInfo": Self.transaction("91")],
        ] }
        let scenario: [String: Any] = ["api": ["notifications": [spec("DID_RENEW", "renewal"), spec("CONSUMPTION_REQUEST", "from-history")]]]
        try await RunWorld.with("consumption-history", scenario: scenario) { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.consent(world, "gamer", true)
            let result = try await ConsumptionAnswerTests.answer(world)
            #expect(result.status == 0, "\(result.stderr.suffix(800))")
            #expect(try await Self.outcomes(world) == ["from-history": "sent"])
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 1)  // the DID_RENEW was not asked for
            #expect(result.stdout.contains("stored from Apple's notification history: 1"), "\(result.stdout)")
        }
    }

    /// A 500 on every attempt leaves the answer pending, counted as the oldest unanswered request
    /// in the metrics; once its deadline passed it ends `failed` and is never sent.
    @Test func transientErrorsPastTheDeadlineEndFailed() async throws {
        let faults = Array(repeating: ["http": 500, "error_code": 5000000] as [String: Any], count: 5)
        try await RunWorld.with("consumption-failed", scenario: ["api": ["consumption": ["faults": ["91": faults]]]]) { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Self.request(Self.transaction("91"), hoursAgo: 10.5, uuid: "slow")])
            let metrics = world.reportRoot.appending(path: "consumption.prom")
            let first = try await ConsumptionAnswerTests.answer(world, ["--metrics-file", metrics.path])
            // Apple never took the answer: exit 1, so a scheduler sees it; the metrics are written all the same.
            #expect(first.status == 1, "\(first.stderr.suffix(800))")
            #expect(first.stderr.contains("consumption.apple_unreachable"), "\(first.stderr.suffix(800))")
            #expect(first.stdout.contains("Apple could not be asked 1 time(s)"), "\(first.stdout)")
            #expect(try await Self.outcomes(world) == ["slow": "pending"])
            let text = try String(contentsOf: metrics, encoding: .utf8)
            let age = text.split(separator: "\n").first { $0.hasPrefix("receipt_reconciler_consumption_oldest_unanswered_seconds ") }
                .flatMap { Int($0.split(separator: " ")[1]) }
            #expect((age ?? 0) >= 10 * 3600, "\(text)")  // what the alert rule fires on
            #expect(text.contains("receipt_reconciler_consumption_apple_unreachable 1\n"), "\(text)")  // and the unreachable alert
            // Time passes: the deadline is behind us.
            try await world.connection.execute("UPDATE iap.consumption_answers SET deadline = now() - interval '1 minute'")
            let second = try await ConsumptionAnswerTests.answer(world, ["--metrics-file", metrics.path])
            #expect(second.status == 0)
            #expect(try await Self.outcomes(world) == ["slow": "failed"])
            #expect(try await Self.received(world).count == 5)  // the five 500s of the first run; nothing after the deadline
            let after = try String(contentsOf: metrics, encoding: .utf8)
            #expect(after.contains("receipt_reconciler_consumption_oldest_unanswered_seconds 0"))
            #expect(after.contains("receipt_reconciler_consumption_apple_unreachable 0\n"), "\(after)")
        }
    }

    /// `--sample-content always` says a sample was given though the ledger shows none, and
    /// `--look-back` leaves a notification stored before it unexamined (its 12 hours are over).
    @Test func sampleContentAndLookBackAreTheOperators() async throws {
        try await RunWorld.with("consumption-options") { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.ledger(world, "gamer", "92")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [
                try Self.request(Self.transaction("91"), uuid: "recent"),
                try Self.request(Self.transaction("92"), hoursAgo: 1, uuid: "stored-long-ago"),
            ])
            // Stored two days ago, as far as the job can tell (a request Apple signed an hour ago cannot be, but the job goes by when it was stored).
            try await world.connection.execute("UPDATE iap.notifications SET received_at = now() - interval '2 days' WHERE notification_uuid = 'stored-long-ago'")
            let result = try await ConsumptionAnswerTests.answer(world, ["--sample-content", "always", "--look-back", "1d"])
            #expect(result.status == 0, "\(result.stderr.suffix(800))")
            #expect(try await Self.outcomes(world) == ["recent": "sent"])
            #expect(try await Self.received(world).map(\.body) == [#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":true}"#])
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE consumption_examined_at IS NULL") == 1)
        }
    }

    /// `cron/answer-consumption-requests.sh`, as cron and the systemd timer start it: the
    /// environment file, the answer sent, and the metrics in a file of their own.
    @Test func theCronWrapperAnswersAndWritesItsMetrics() async throws {
        try await RunWorld.with("consumption-wrapper") { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Self.request(Self.transaction("91"))])
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let root = world.reportRoot.appending(path: "root.der")
            try Data(V2Notifications.chain.root).write(to: root)
            let key = try Fixtures.privateKey(at: world.reportRoot.appending(path: "key.p8"))
            let envFile = world.reportRoot.appending(path: "reconciler.env")
            try Self.environment(world, key: key).filter { $0.key.hasPrefix("APPSTORE_") || $0.key == "DATABASE_URL" }
                .sorted { $0.key < $1.key }.map { "\($0.key)='\($0.value)'" }.joined(separator: "\n")
                .write(to: envFile, atomically: true, encoding: .utf8)
            let data = world.reportRoot.appending(path: "data")
            #expect(try await CronWrapperTests.runWrapper(
                "cron/answer-consumption-requests.sh", arguments: ["--apple-root-certificate", root.path], environmentFile: envFile, data: data) == 0)
            #expect(try await Self.received(world).map(\.status) == [202])
            let metrics = try String(contentsOf: data.appending(path: "metrics/receipt_reconciler_consumption.prom"), encoding: .utf8)
            #expect(metrics.contains("receipt_reconciler_consumption_answers{outcome=\"sent\"} 1"), "\(metrics)")
        }
    }

    /// Two answering processes never run at once: while one holds the answering lock, another
    /// exits 4 and records and sends nothing.
    @Test func aSecondAnsweringProcessExitsFour() async throws {
        try await RunWorld.with("consumption-lock") { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Self.request(Self.transaction("91"))])
            let holder = try await world.database.connect()
            try await holder.execute("SELECT pg_advisory_lock(125835620085363)")  // "rrcons", ConsumptionStore.lockKey
            let result = try await ConsumptionAnswerTests.answer(world)
            await holder.close()
            #expect(result.status == 4, "\(result.stderr.suffix(800))")
            #expect(result.stderr.contains("another answer-consumption-requests holds the lock"))
            #expect(try await world.count("SELECT count(*) FROM iap.consumption_answers") == 0)
            #expect(try await Self.received(world).isEmpty)
        }
    }

    /// Apple refusing the key (401): exit 2, nothing sent, and the request left for a run with the right key.
    @Test func aRefusedKeyExitsTwoAndLeavesTheRequestForTheNextRun() async throws {
        try await RunWorld.with("consumption-401", scenario: ["api": ["unauthorized": true]]) { world in
            try await Self.ledger(world, "gamer", "91")
            try await Self.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Self.request(Self.transaction("91"), uuid: "locked-out")])
            let result = try await ConsumptionAnswerTests.answer(world)
            #expect(result.status == 2, "\(result.stderr.suffix(800))")
            #expect(result.stderr.contains("Apple refused the App Store Connect key"))
            #expect(try await Self.received(world).isEmpty)
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE consumption_examined_at IS NULL") == 1)
        }
    }
}
