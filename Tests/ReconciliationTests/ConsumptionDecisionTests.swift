import AppStoreModels
import Foundation
import Reconciliation
import Testing

/// The body of an answer to a CONSUMPTION_REQUEST, rule by rule (docs/consumption.md, "The body"):
/// each row a request, what the job knows, and the body (or the reason nothing is sent), derived
/// by hand from the rules.
@Suite struct ConsumptionDecisionTests {
    static let asked = Date(timeIntervalSince1970: 1_790_000_000)
    static let now = asked.addingTimeInterval(3600)

    static func request(_ type: SignedProductType?, group: String? = nil, advanced: Bool = false, asked: Date = asked) -> ConsumptionRequest {
        ConsumptionRequest(
            notificationUUID: "n-1", transactionId: "500", originalTransactionId: "400", productId: "coins.100", productType: type,
            subscriptionGroupIdentifier: group, environment: .production, reason: "UNINTENDED_PURCHASE", requestedAt: asked,
            isAdvancedCommerce: advanced)
    }

    static let consenting = ConsumptionFacts.Consent(consented: true)

    struct Row: CustomTestStringConvertible, Sendable {
        var label: String
        var request: ConsumptionRequest
        var facts: ConsumptionFacts
        var policy = ConsumptionPolicy()
        var now = ConsumptionDecisionTests.now
        var expected: String
        var testDescription: String { label }
    }

    static let rows: [Row] = [
        // Nothing sent, and why.
        Row(label: "not ours", request: request(.consumable), facts: ConsumptionFacts(accountId: nil), expected: "skip unmatched"),
        Row(label: "advanced commerce", request: request(.consumable, advanced: true),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true), expected: "skip advanced_commerce"),
        Row(label: "12 hours passed", request: request(.consumable), facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true),
            now: asked.addingTimeInterval(12 * 3600), expected: "skip past_deadline"),
        Row(label: "within the last minute of the 12 hours: it would arrive late", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true), now: asked.addingTimeInterval(12 * 3600 - 30),
            expected: "skip past_deadline"),
        Row(label: "answered within 12 hours", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true, answeredRecently: true), expected: "skip answered_already"),
        Row(label: "no consent row", request: request(.consumable), facts: ConsumptionFacts(accountId: "a", inLedger: true),
            expected: "no_consent no_consent_row"),
        Row(label: "consent false", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: .init(consented: false, refundPreference: .decline), inLedger: true),
            expected: "no_consent consented_false"),
        Row(label: "not ours, past the deadline: final", request: request(.consumable), facts: ConsumptionFacts(accountId: nil),
            now: asked.addingTimeInterval(12 * 3600), expected: "skip past_deadline"),
        // Several accounts hold the transaction (one Apple ID under several app accounts).
        Row(label: "two holders, one without a consent row", request: request(.consumable),
            facts: ConsumptionFacts(holders: [.init(accountId: "alice", consent: consenting), .init(accountId: "bob", consent: nil)], inLedger: true),
            expected: "no_consent ambiguous_holder"),
        Row(label: "two holders, one consented false", request: request(.consumable),
            facts: ConsumptionFacts(holders: [.init(accountId: "alice", consent: consenting), .init(accountId: "bob", consent: .init(consented: false))],
                                    inLedger: true),
            expected: "no_consent ambiguous_holder"),
        Row(label: "two holders, both consent, preferences agree", request: request(.consumable),
            facts: ConsumptionFacts(holders: [.init(accountId: "alice", consent: .init(consented: true, refundPreference: .decline)),
                                              .init(accountId: "bob", consent: .init(consented: true, refundPreference: .decline))], inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"DECLINE"}"#),
        Row(label: "two holders, both consent, preferences differ: none sent", request: request(.consumable),
            facts: ConsumptionFacts(holders: [.init(accountId: "alice", consent: .init(consented: true, refundPreference: .grantFull)),
                                              .init(accountId: "bob", consent: consenting)], inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false} (refundPreference left out: the holders' preferences differ)"#),
        Row(label: "two holders, one preference and the default agreeing", request: request(.consumable),
            facts: ConsumptionFacts(holders: [.init(accountId: "alice", consent: .init(consented: true, refundPreference: .grantFull)),
                                              .init(accountId: "bob", consent: consenting)], inLedger: true),
            policy: .init(defaultRefundPreference: .grantFull),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"GRANT_FULL"}"#),
        // What the ledger knows, without usage.
        Row(label: "in the ledger (revoked or not: a refund does not undo a delivery)", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#),
        Row(label: "not in the ledger yet, nothing declared: no evidence, examined again", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting), expected: "skip unmatched"),
        Row(label: "not in the ledger, the app declared it undelivered", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, usage: .init(deliveryStatus: .undeliveredQualityIssue)),
            expected: #"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_QUALITY_ISSUE","sampleContentProvided":false}"#),
        Row(label: "a free trial before the purchase", request: request(.autoRenewable, group: "g"),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true, sampleBefore: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":true}"#),
        Row(label: "sample: never", request: request(.autoRenewable, group: "g"),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true, sampleBefore: true), policy: .init(sampleContent: .never),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#),
        Row(label: "sample: always", request: request(.nonConsumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true), policy: .init(sampleContent: .always),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":true}"#),
        // The refund preference: the consent row's, else the default.
        Row(label: "the consent row's preference", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: .init(consented: true, refundPreference: .decline), inLedger: true),
            policy: .init(defaultRefundPreference: .grantFull),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"DECLINE"}"#),
        Row(label: "the default preference", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, inLedger: true), policy: .init(defaultRefundPreference: .grantFull),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"GRANT_FULL"}"#),
        // Usage from the app.
        Row(label: "the app's percentage for a consumable", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, usage: .init(consumptionPercentage: 25_000), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":25000}"#),
        Row(label: "never a percentage for an auto-renewable subscription", request: request(.autoRenewable, group: "g"),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, usage: .init(consumptionPercentage: 25_000), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false} (consumptionPercentage left out: never for an auto-renewable subscription)"#),
        Row(label: "no type, but a subscription group: an auto-renewable subscription", request: request(nil, group: "g"),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, usage: .init(consumptionPercentage: 25_000), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false} (consumptionPercentage left out: never for an auto-renewable subscription)"#),
        Row(label: "the app's delivery status wins over the ledger", request: request(.nonConsumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, usage: .init(deliveryStatus: .undeliveredServerOutage), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_SERVER_OUTAGE","sampleContentProvided":false}"#),
        Row(label: "0 when not delivered", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: consenting, usage: .init(consumptionPercentage: 40_000, deliveryStatus: .undeliveredWrongItem), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_WRONG_ITEM","sampleContentProvided":false,"consumptionPercentage":0} (consumptionPercentage sent as 0: not delivered)"#),
        Row(label: "prorated with a percentage strictly inside", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: .init(consented: true, refundPreference: .grantProrated), usage: .init(consumptionPercentage: 30_000), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":30000,"refundPreference":"GRANT_PRORATED"}"#),
        Row(label: "prorated without a percentage: the preference is left out", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: .init(consented: true, refundPreference: .grantProrated), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false} (refundPreference GRANT_PRORATED left out: it needs a consumptionPercentage strictly between 0 and 100000)"#),
        Row(label: "prorated at 100000: the preference is left out", request: request(.consumable),
            facts: ConsumptionFacts(accountId: "a", consent: .init(consented: true, refundPreference: .grantProrated), usage: .init(consumptionPercentage: 100_000), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":100000} (refundPreference GRANT_PRORATED left out: it needs a consumptionPercentage strictly between 0 and 100000)"#),
        Row(label: "prorated for an auto-renewable subscription: Apple prorates by time", request: request(.autoRenewable, group: "g"),
            facts: ConsumptionFacts(accountId: "a", consent: .init(consented: true, refundPreference: .grantProrated), inLedger: true),
            expected: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"GRANT_PRORATED"}"#),
    ]

    @Test(arguments: rows) func theDecision(_ row: Row) {
        let decision = ConsumptionDecision.decide(row.request, row.facts, policy: row.policy, now: row.now)
        let text: String = switch decision {
        case .send(let body, let note): body.json + (note.map { " (\($0))" } ?? "")
        case .skip(let outcome, _): "skip \(outcome.rawValue)"
        case .noConsent(let missing, _): "no_consent \(missing.rawValue)"
        }
        #expect(text == row.expected)
    }

    /// Every body the rules make is one Apple's reader takes: JSON, the three required members.
    @Test(arguments: rows) func everyBodyIsJSONWithTheRequiredMembers(_ row: Row) throws {
        guard case .send(let body, _) = ConsumptionDecision.decide(row.request, row.facts, policy: row.policy, now: row.now) else { return }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body.json.utf8)) as? [String: Any])
        #expect(object["customerConsented"] as? Bool == true)
        #expect(object["deliveryStatus"] is String)
        #expect(object["sampleContentProvided"] is Bool)
    }
}
