import AppleSimulator
import Foundation
import HTTP
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// Answers true and consented at the moment they leave (docs/consumption.md, "The body" and
/// "Consent is the app's to declare"): the executable against real PostgreSQL and the simulator,
/// each case one a review traced, each expected body written by hand from the rules.
@Suite struct ConsumptionAtSendingTests {
    typealias Answers = ConsumptionAnswerTests

    static func answerRow(_ world: RunWorld, _ uuid: String) async throws -> (outcome: String, why: String?, detail: String?, holders: String) {
        let row = try await world.connection.query("""
            SELECT outcome, why, detail, array_to_string(holders, ',') AS holders FROM iap.consumption_answers WHERE notification_uuid = \(uuid)
            """)[0]
        return (try row.decode("outcome"), try row.decode("why"), try row.decode("detail"), try row.decode("holders"))
    }

    /// Apple answered 500 to every attempt; the customer then withdrew consent. The next run sends
    /// nothing (Apple: once consent is withdrawn, send nothing more), nor for the customer's other
    /// pending answer: each is decided again when its turn comes.
    @Test func consentWithdrawnBetweenA500AndTheRetrySendsNothingMore() async throws {
        let faults = Array(repeating: ["http": 500, "error_code": 5000000] as [String: Any], count: 5)
        try await RunWorld.with("consumption-withdrawn", scenario: ["api": ["consumption": ["faults": ["91": faults, "92": faults]]]]) { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.ledger(world, "gamer", "92")
            try await Answers.consent(world, "gamer", true, preference: "GRANT_FULL")
            _ = try await V2Notifications.ingest(world, [
                try Answers.request(Answers.transaction("91"), hoursAgo: 3, uuid: "first"),
                try Answers.request(Answers.transaction("92"), hoursAgo: 2, uuid: "second"),
            ])
            let first = try await Answers.answer(world)
            #expect(first.status == 1, "Apple took neither answer: \(first.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world) == ["first": "pending", "second": "pending"])
            #expect(try await Answers.received(world).map(\.status) == Array(repeating: 500, count: 10))
            // Each attempt was claimed, decided again, on its own: none left on an earlier reading of consent.
            #expect(try await world.count("SELECT sum(attempts) FROM iap.consumption_answers") == 10)

            try await world.connection.execute("UPDATE iap.consumption_consent SET consented = false WHERE account_id = 'gamer'")
            let second = try await Answers.answer(world)
            #expect(second.status == 0, "\(second.stderr.suffix(800))")
            #expect(try await Answers.received(world).count == 10)  // nothing after the withdrawal
            #expect(try await Answers.outcomes(world) == ["first": "no_consent", "second": "no_consent"])
            let withheld = try await Self.answerRow(world, "second")
            #expect(withheld.why == "consented_false" && withheld.detail == "account gamer: consented = false", "\(withheld)")
            #expect(try await world.count("SELECT count(*) FROM iap.consumption_answers WHERE body IS NOT NULL") == 0)
        }
    }

    /// One Apple ID's purchase under two app accounts (account switching on one device): alice's
    /// ledger and bob's stored receipt name it. Alice consented, bob did not: nothing is sent, the
    /// reason is `ambiguous_holder`, and both accounts' explain show it.
    @Test func everyHolderMustConsent() async throws {
        try await RunWorld.with("consumption-holders") { world in
            try await Answers.ledger(world, "alice", "91")
            try await Answers.consent(world, "alice", true, preference: "GRANT_FULL")
            let receipt = try await world.addReceipt("bob", "stored-blob")
            try await world.connection.execute("UPDATE iap.app_receipts SET receipt_original_transaction_ids = '{91}' WHERE id = \(receipt)")
            _ = try await V2Notifications.ingest(world, [try Answers.request(Answers.transaction("91"), uuid: "shared")])
            let result = try await Answers.answer(world)
            #expect(result.status == 0, "\(result.stderr.suffix(800))")
            #expect(try await Answers.received(world).isEmpty)
            let row = try await Self.answerRow(world, "shared")
            #expect(row.outcome == "no_consent" && row.why == "ambiguous_holder" && row.holders == "alice,bob", "\(row)")
            #expect(row.detail?.contains("account bob: no row in iap.consumption_consent") == true, "\(row.detail ?? "")")
            #expect(result.stdout.contains("no consent, why: ambiguous_holder 1"), "\(result.stdout)")
            for account in ["alice", "bob"] {
                let text = try await ExplainTests.explain(world, [account])
                #expect(text.stdout.contains("no_consent (ambiguous_holder)"), "\(account): \(text.stdout)")
            }
        }
    }

    /// A renewal bought after the last nightly run is not in the ledger: the request's own verified
    /// transaction is written to it first (as the notification's processing would), and it is
    /// DELIVERED; the ledger's lag is never evidence of a failed delivery.
    @Test func aRenewalNewerThanTheLedgerIsLearnedThenDelivered() async throws {
        try await RunWorld.with("consumption-renewal") { world in
            _ = try await world.addReceipt("subscriber", "stored-blob")
            try await Answers.ledger(world, "subscriber", "300", product: "pro.monthly", group: "g1")
            try await Answers.consent(world, "subscriber", true)
            let renewal = Answers.transaction("302", product: "pro.monthly", type: "Auto-Renewable Subscription",
                                              extra: ["originalTransactionId": "300", "subscriptionGroupIdentifier": "g1", "webOrderLineItemId": "w2"])
            _ = try await V2Notifications.ingest(world, [try Answers.request(renewal, uuid: "renewal")])
            let result = try await Answers.answer(world)
            #expect(result.status == 0, "\(result.stderr.suffix(800))")
            #expect(try await Answers.received(world).map(\.body)
                == [#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#])
            let ledger = try await world.connection.query("SELECT account_id, source FROM iap.transactions WHERE transaction_id = '302'")
            #expect(try ledger.first?.decode("account_id", as: String.self) == "subscriber")
            #expect(try ledger.first?.decode("source", as: String.self) == "notification_v2")
            // The account's next run verifies it again: its ledger has a row its last answer did not describe.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE account_id = 'subscriber' AND reverify_requested_at IS NOT NULL") == 1)
        }
    }

    /// `sampleContentProvided` is true only for a free trial of the same product or group that
    /// began before the purchase, in its environment, in a ledger Apple's word gives the holder:
    /// never for a paid introductory offer, a trial after, a sandbox trial, or a trial of another
    /// account whose stored receipt merely names the purchase.
    @Test func onlyAFreeTrialBeforeThePurchaseIsASample() async throws {
        try await RunWorld.with("consumption-sample") { world in
            // payer: a pay-up-front introductory offer (verifyReceipt's is_in_intro_offer_period, Apple's signed PAY_UP_FRONT).
            // trier: a free trial, but after the purchase asked about. tester: a free trial before it, in the sandbox.
            // sampler: a free trial before it. Last, lender's purchase, which a stranger's stored receipt names too:
            // the stranger's own free trial is no sample of lender's (a receipt's decode is what a device sent).
            let offers = [("payer", "PAY_UP_FRONT", false, 10, "Production"), ("trier", "FREE_TRIAL", true, 1, "Production"),
                          ("tester", "FREE_TRIAL", true, 10, "Sandbox"), ("sampler", "FREE_TRIAL", true, 10, "Production"),
                          ("stranger", "FREE_TRIAL", true, 10, "Production")]
            for (account, offer, trial, daysAgo, environment) in offers {
                try await world.connection.execute("""
                    INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                        environment, subscription_group_identifier, is_trial_period, is_in_intro_offer_period, offer_discount_type)
                    VALUES (\(account + "-offer"), \(account), \(account + "-offer"), 'pro.monthly', now() - \(daysAgo) * interval '1 day', 1,
                            \(environment), 'g1', \(trial), true, \(offer))
                    """)
            }
            try await Answers.consent(world, "stranger", true)
            let receipt = try await world.addReceipt("stranger", "stored-blob")
            try await world.connection.execute("UPDATE iap.app_receipts SET receipt_original_transaction_ids = '{lender-paid}' WHERE id = \(receipt)")
            for account in ["payer", "trier", "tester", "sampler", "lender"] {
                try await Answers.ledger(world, account, account + "-paid", product: "pro.yearly", group: "g1")
                try await Answers.consent(world, account, true)
            }
            _ = try await V2Notifications.ingest(world, try ["payer", "trier", "tester", "sampler", "lender"].enumerated().map { index, account in
                try Answers.request(Answers.transaction(account + "-paid", product: "pro.yearly", type: "Auto-Renewable Subscription",
                                                        extra: ["subscriptionGroupIdentifier": "g1"]), hoursAgo: Double(6 - index))
            })
            let result = try await Answers.answer(world)
            #expect(result.status == 0, "\(result.stderr.suffix(800))")
            let received = try await Answers.received(world)
            let none = #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#
            #expect(received.map(\.transaction) == ["payer-paid", "trier-paid", "tester-paid", "sampler-paid", "lender-paid"])
            #expect(received.map(\.body) == [none, none, none, #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":true}"#, none])
        }
    }

    /// A request for a transaction no account held is `unmatched` but not final: once the ledger
    /// learns it (the app server stored the receipt, a run verified it), the next run answers it.
    @Test func anUnmatchedRequestIsAnsweredOnceTheLedgerLearnsIt() async throws {
        try await RunWorld.with("consumption-unmatched") { world in
            _ = try await V2Notifications.ingest(world, [try Answers.request(Answers.transaction("77"), uuid: "early")])
            let first = try await Answers.answer(world)
            #expect(first.status == 0, "\(first.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world) == ["early": "unmatched"])
            try await Answers.ledger(world, "newcomer", "77")
            try await Answers.consent(world, "newcomer", true)
            let second = try await Answers.answer(world)
            #expect(second.status == 0, "\(second.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world) == ["early": "sent"])
            #expect(second.stdout.contains("requests decided anew since an earlier run (matched, or consent given): 1"), "\(second.stdout)")
            #expect(try await Answers.received(world).map(\.transaction) == ["77"])
        }
    }

    /// No consent row when the request came: `no_consent`, but not for good. The app asks the
    /// customer, writes the row, and the next run answers within the 12 hours. A `consented =
    /// false` found then would have been final.
    @Test func aConsentGivenAfterTheRequestIsStillAnswered() async throws {
        try await RunWorld.with("consumption-consent-later") { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.ledger(world, "refuser", "92")
            try await Answers.consent(world, "refuser", false)
            _ = try await V2Notifications.ingest(world, [
                try Answers.request(Answers.transaction("91"), uuid: "asked-first"),
                try Answers.request(Answers.transaction("92"), uuid: "declined"),
            ])
            #expect(try await Answers.answer(world).status == 0)
            #expect(try await Answers.outcomes(world) == ["asked-first": "no_consent", "declined": "no_consent"])
            try await Answers.consent(world, "gamer", true)
            try await world.connection.execute("UPDATE iap.consumption_consent SET consented = true WHERE account_id = 'refuser'")
            let next = try await Answers.answer(world)
            #expect(next.status == 0, "\(next.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world) == ["asked-first": "sent", "declined": "no_consent"])
            #expect(try await Answers.received(world).map(\.transaction) == ["91"])
        }
    }

    /// A "no" is final however it is found: a missing row that became `consented = false` by the
    /// next run, or one holder's no among several. A later yes sends nothing for these requests.
    @Test func aNoIsFinalWhenItIsFound() async throws {
        try await RunWorld.with("consumption-no-final") { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.ledger(world, "alice", "92")
            try await Answers.consent(world, "alice", true)
            let receipt = try await world.addReceipt("bob", "stored-blob")
            try await world.connection.execute("UPDATE iap.app_receipts SET receipt_original_transaction_ids = '{92}' WHERE id = \(receipt)")
            try await Answers.consent(world, "bob", false)
            _ = try await V2Notifications.ingest(world, [
                try Answers.request(Answers.transaction("91"), uuid: "no-row-then-no"),
                try Answers.request(Answers.transaction("92"), uuid: "one-holder-said-no"),
            ])
            #expect(try await Answers.answer(world).status == 0)
            try await Answers.consent(world, "gamer", false)
            #expect(try await Answers.answer(world).status == 0)
            #expect(try await Self.answerRow(world, "no-row-then-no").why == "consented_false")
            try await world.connection.execute("UPDATE iap.consumption_consent SET consented = true")
            #expect(try await Answers.answer(world).status == 0)
            #expect(try await Answers.outcomes(world) == ["no-row-then-no": "no_consent", "one-holder-said-no": "no_consent"])
            #expect(try await Answers.received(world).isEmpty)
        }
    }

    /// Apple's 429 pauses the endpoint; the customer withdraws during the pause. The pause is
    /// waited out before the answer is decided again, so nothing leaves on the consent read before.
    @Test func aWithdrawalDuringA429PauseSendsNothing() async throws {
        // Under the thread sanitizer and a whole suite's load, the withdrawal once came after a
        // 4-second pause had ended: the pause is longer there (Apple may ask for up to 120 s).
        let faults: [[String: Any]] = [["http": 429, "retry_after_ms": isSanitizedRun ? 20_000 : 4000]]
        try await RunWorld.with("consumption-429-withdrawn", scenario: ["api": ["consumption": ["faults": ["91": faults]]]]) { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Answers.request(Answers.transaction("91"), uuid: "paused")])
            async let run = Answers.answer(world)
            // Withdrawn once Apple's 429 came back, inside its 4-second pause (not after a fixed wait:
            // under the thread sanitizer the first attempt once came later than that).
            try await waitUntil("Apple answered the first attempt 429") { try await !Answers.received(world).isEmpty }
            try await world.connection.execute("UPDATE iap.consumption_consent SET consented = false WHERE account_id = 'gamer'")
            let result = try await run
            #expect(result.status == 0, "\(result.stderr.suffix(800))")
            #expect(try await Answers.received(world).map(\.status) == [429])
            #expect(try await Self.answerRow(world, "paused").why == "consented_false")
        }
    }

    /// A run without the app's Apple ID would refuse production signed data: with the key it stops
    /// before anything (exit 2, naming the setting); the request is not lost: the next run,
    /// configured, examines it and answers it within the 12 hours.
    @Test func aRequestAConfigurationRefusedIsExaminedAgain() async throws {
        try await RunWorld.with("consumption-configuration") { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [try Answers.request(Answers.transaction("91"), uuid: "early")])
            let unconfigured = try await Answers.answer(world, environment: ["APPSTORE_APP_APPLE_ID": ""])
            #expect(unconfigured.status == 2, "\(unconfigured.stderr.suffix(800))")
            #expect(unconfigured.stderr.contains("APPSTORE_APP_APPLE_ID"), "\(unconfigured.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world).isEmpty)
            #expect(try await Answers.answer(world).status == 0)
            #expect(try await Answers.outcomes(world) == ["early": "sent"])
        }
    }

    /// A second request for a transaction whose first answer is only queued is not
    /// `answered_already`: that answer may still fail. Here it does (a 500 on every attempt), the
    /// second is sent, and only then is the first `answered_already`.
    @Test func aQueuedFirstAnswerIsNoAnswerUntilAppleTookIt() async throws {
        let faults = Array(repeating: ["http": 500, "error_code": 5000000] as [String: Any], count: 5)
        try await RunWorld.with("consumption-queued", scenario: ["api": ["consumption": ["faults": ["91": faults]]]]) { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [
                try Answers.request(Answers.transaction("91"), hoursAgo: 2, uuid: "first"),
                try Answers.request(Answers.transaction("91"), hoursAgo: 1, uuid: "second", reason: "OTHER"),
            ])
            let run = try await Answers.answer(world)
            #expect(run.status == 1, "Apple did not take the first answer: \(run.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world) == ["first": "pending", "second": "sent"])
            #expect(try await Answers.received(world).map(\.status) == Array(repeating: 500, count: 5) + [202])
            let next = try await Answers.answer(world)
            #expect(next.status == 0, "\(next.stderr.suffix(800))")
            #expect(try await Answers.outcomes(world) == ["first": "answered_already", "second": "sent"])
            #expect(try await Answers.received(world).count == 6)
        }
    }

    /// The nightly run's summary carries the answers of the last 24 hours by outcome and the age of
    /// the oldest request still waiting (an answer Apple did not take yet; a request not matched yet).
    @Test func theNightlySummaryCarriesTheAnswers() async throws {
        let faults = Array(repeating: ["http": 500, "error_code": 5000000] as [String: Any], count: 5)
        try await RunWorld.with("consumption-nightly", scenario: ["api": ["consumption": ["faults": ["91": faults]]]]) { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.consent(world, "gamer", true)
            _ = try await V2Notifications.ingest(world, [
                try Answers.request(Answers.transaction("91"), hoursAgo: 3, uuid: "waiting"),
                try Answers.request(Answers.transaction("88"), hoursAgo: 1, uuid: "nobodys"),
            ])
            #expect(try await Answers.answer(world).status == 1)  // Apple did not take the answer
            let (summary, _) = try await world.run(world.options())
            #expect(summary.consumptionAnswers == ["pending": 1, "unmatched": 1])
            let age = try #require(summary.consumptionOldestUnansweredSeconds)
            #expect(age >= 3 * 3600 - 120 && age < 4 * 3600, "\(age)")
            let report = try #require(try world.lastReportDirectory())
            let json = try JSONSerialization.jsonObject(with: Data(contentsOf: report.appending(path: "summary.json"))) as? [String: Any]
            #expect(json?["consumptionAnswers"] as? [String: Int] == ["pending": 1, "unmatched": 1])
            #expect(json?["consumptionOldestUnansweredSeconds"] as? Int == age)
        }
    }

    /// `--dry-run` reads Apple's notification history too (storing nothing), so it shows a request
    /// only Apple has.
    @Test func aDryRunShowsARequestOnlyInNotificationHistory() async throws {
        let spec: [String: Any] = [
            "notificationType": "CONSUMPTION_REQUEST", "notificationUUID": "from-history",
            "signedDate": Int64(Date().timeIntervalSince1970 * 1000) - Answers.hour,
            "data": ["bundleId": "com.example.app", "environment": "Production", "appAppleId": V2Notifications.appAppleId,
                     "transactionInfo": Answers.transaction("91")],
        ]
        try await RunWorld.with("consumption-dry-history", scenario: ["api": ["notifications": [spec]]]) { world in
            try await Answers.ledger(world, "gamer", "91")
            try await Answers.consent(world, "gamer", true)
            let dry = try await Answers.answer(world, ["--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr.suffix(800))")
            #expect(dry.stdout.contains(#"transaction 91 (account gamer): {"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#),
                    "\(dry.stdout)")
            #expect(try await world.count("SELECT count(*) FROM iap.notifications") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.consumption_answers") == 0)
            #expect(try await Answers.received(world).isEmpty)
        }
    }

    /// A token of the shape Apple checks (the simulator does not verify its signature).
    static func wellFormedToken() -> String {
        let now = Int64(Date().timeIntervalSince1970)
        let encode: ([String: Any]) -> String = { object in
            (try? JSONSerialization.data(withJSONObject: object))!.base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let signature = Data(count: 64).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return encode(["alg": "ES256", "typ": "JWT", "kid": "K"]) + "."
            + encode(["aud": "appstoreconnect-v1", "iss": "i", "bid": "com.example.app", "iat": now, "exp": now + 600]) + "." + signature
    }

    /// The simulator refuses a body as Apple does, with Apple's error code where Apple's list has
    /// one, and with a code outside Apple's ranges where it does not.
    @Test(arguments: [
        (#"{"customerConsented":false,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#, 4_000_035),
        (#"{"customerConsented":true,"deliveryStatus":"LOST","sampleContentProvided":false}"#, 4_000_036),
        (#"{"customerConsented":true,"deliveryStatus":"DELIVERED"}"#, 4_000_041),
        (#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"MAYBE"}"#, 4_000_044),
        (#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":100001}"#, 9_000_001),
        (#"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_OTHER","sampleContentProvided":false,"consumptionPercentage":5}"#, 9_000_002),
        (#"not json"#, 4_000_000),
    ])
    func theSimulatorRefusesWithApplesCodes(_ body: String, _ code: Int) async throws {
        try await RunWorld.with("consumption-codes") { world in
            let client = HTTPClient()
            defer { client.shutdown() }
            let response = try await client.execute(HTTPRequest(
                url: "http://127.0.0.1:\(world.simulator.port)/inApps/v2/transactions/consumption/91", method: "PUT",
                headers: ["Authorization: Bearer \(Self.wellFormedToken())", "Content-Type: application/json"], body: Array(body.utf8)))
            #expect(response.status == 400)
            let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
            #expect(object?["errorCode"] as? Int == code, "\(String(decoding: response.body, as: UTF8.self))")
        }
    }
}
