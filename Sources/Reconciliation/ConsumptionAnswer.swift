import AppStoreModels
import Foundation

/// How one CONSUMPTION_REQUEST ended (docs/consumption.md, "Outcomes"): the `outcome` column of
/// `iap.consumption_answers`.
public enum ConsumptionOutcome: String, Sendable, CaseIterable, Codable {
    /// Recorded with its body, not sent yet (or sent and answered by a 5xx or a timeout, to be
    /// tried again while the deadline allows).
    case pending
    /// Its request is leaving (or left): never sent again.
    case sending
    /// Apple accepted it (202).
    case sent
    /// The app declared no consent for the account (no row, or `consented` false): nothing sent.
    case noConsent = "no_consent"
    /// Twelve hours passed since Apple asked: never sent.
    case pastDeadline = "past_deadline"
    /// Apple refused the body (a 4xx, with its `errorCode`).
    case refused
    /// Transient errors lasted past the deadline, or the process died while the request left.
    case failed
    /// No account of this app owns the transaction.
    case unmatched
    /// An Advanced Commerce purchase: Send Consumption Information V2 does not take those.
    case advancedCommerce = "advanced_commerce"
    /// The transaction was answered within the last 12 hours (or its answer waits to leave): Apple has the app's answer.
    case answeredAlready = "answered_already"

    /// Still waiting for an answer to leave.
    public var isOpen: Bool { self == .pending || self == .sending }
}

/// A verified CONSUMPTION_REQUEST: everything comes from the notification after its chain and
/// signature (and its transaction's) verified.
public struct ConsumptionRequest: Sendable, Equatable {
    public var notificationUUID: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var productId: String
    /// The signed transaction's `type`; nil when Apple left it out.
    public var productType: SignedProductType?
    public var subscriptionGroupIdentifier: String?
    public var environment: AppleEnvironment
    /// `data.consumptionRequestReason` as signed.
    public var reason: String?
    /// The notification's `signedDate`: the 12 hours count from here.
    public var requestedAt: Date
    public var isAdvancedCommerce: Bool

    public init(notificationUUID: String, transactionId: String, originalTransactionId: String?, productId: String,
                productType: SignedProductType?, subscriptionGroupIdentifier: String?, environment: AppleEnvironment, reason: String?,
                requestedAt: Date, isAdvancedCommerce: Bool) {
        self.notificationUUID = notificationUUID
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.productType = productType
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.environment = environment
        self.reason = reason
        self.requestedAt = requestedAt
        self.isAdvancedCommerce = isAdvancedCommerce
    }

    /// Apple weighs an answer sent within 12 hours of its request.
    public static let answerWindow: TimeInterval = 12 * 3600

    /// An auto-renewable subscription: by its signed `type`, else (Apple left the type out) by its
    /// subscription group, which only auto-renewable subscriptions have.
    public var isAutoRenewable: Bool {
        productType == .autoRenewable || (productType == nil && subscriptionGroupIdentifier != nil)
    }
    public var deadline: Date { requestedAt.addingTimeInterval(Self.answerWindow) }
}

/// What the job knows, for one request: the app's declarations and the verified ledger.
public struct ConsumptionFacts: Sendable, Equatable {
    /// The account owning the transaction; nil: not ours.
    public var accountId: String?
    /// The app's consent row: nil when it wrote none.
    public var consent: Consent?
    /// The app's usage row for the transaction: nil when it wrote none.
    public var usage: Usage?
    /// The transaction is in the ledger.
    public var inLedger: Bool
    /// The ledger row carries a revocation (a refund Apple already gave).
    public var revoked: Bool
    /// The ledger shows a free trial or an introductory offer for the same product or subscription group.
    public var sampleInLedger: Bool
    /// An answer to this transaction is waiting to leave, or left within the last 12 hours.
    public var answeredRecently: Bool

    public struct Consent: Sendable, Equatable {
        public var consented: Bool
        public var refundPreference: ConsumptionInformation.RefundPreference?
        public init(consented: Bool, refundPreference: ConsumptionInformation.RefundPreference? = nil) {
            self.consented = consented
            self.refundPreference = refundPreference
        }
    }

    public struct Usage: Sendable, Equatable {
        public var consumptionPercentage: Int?
        public var deliveryStatus: ConsumptionInformation.DeliveryStatus?
        public init(consumptionPercentage: Int? = nil, deliveryStatus: ConsumptionInformation.DeliveryStatus? = nil) {
            self.consumptionPercentage = consumptionPercentage
            self.deliveryStatus = deliveryStatus
        }
    }

    public init(accountId: String?, consent: Consent? = nil, usage: Usage? = nil, inLedger: Bool = false, revoked: Bool = false,
                sampleInLedger: Bool = false, answeredRecently: Bool = false) {
        self.accountId = accountId
        self.consent = consent
        self.usage = usage
        self.inLedger = inLedger
        self.revoked = revoked
        self.sampleInLedger = sampleInLedger
        self.answeredRecently = answeredRecently
    }
}

/// The operator's settings (`answer-consumption-requests`' options).
public struct ConsumptionPolicy: Sendable, Equatable {
    /// `sampleContentProvided`: from the ledger, or always true or false (`--sample-content`).
    public enum SampleContent: String, Sendable, CaseIterable {
        case ledger, always, never
    }

    public var sampleContent: SampleContent = .ledger
    /// Sent when the consent row names no preference (`--refund-preference`); nil leaves it out.
    public var defaultRefundPreference: ConsumptionInformation.RefundPreference?
    /// No request leaves this close to its deadline: it would arrive late.
    public var deadlineMargin: TimeInterval = 60

    public init(sampleContent: SampleContent = .ledger, defaultRefundPreference: ConsumptionInformation.RefundPreference? = nil) {
        self.sampleContent = sampleContent
        self.defaultRefundPreference = defaultRefundPreference
    }
}

/// The decision for one request (docs/consumption.md, "The body"): a pure function of the
/// request, the facts and the policy, so that every rule is held by a table test.
public enum ConsumptionDecision: Sendable, Equatable {
    /// Send this body; `note` says what was left out and why, for the record.
    case send(ConsumptionInformation, note: String?)
    /// Send nothing: the outcome and why.
    case skip(ConsumptionOutcome, detail: String)

    public static func decide(_ request: ConsumptionRequest, _ facts: ConsumptionFacts, policy: ConsumptionPolicy, now: Date) -> Self {
        guard let account = facts.accountId else {
            return .skip(.unmatched, detail: "no account of this app owns transaction \(request.transactionId)")
        }
        if request.isAdvancedCommerce {
            return .skip(.advancedCommerce, detail: "an Advanced Commerce purchase: Send Consumption Information V2 does not take it")
        }
        guard now < request.deadline.addingTimeInterval(-policy.deadlineMargin) else {
            return .skip(.pastDeadline, detail: "Apple asked at \(request.requestedAt); its 12 hours ended at \(request.deadline)")
        }
        if facts.answeredRecently {
            return .skip(.answeredAlready, detail: "transaction \(request.transactionId) was answered in the last 12 hours")
        }
        guard let consent = facts.consent, consent.consented else {
            let why = facts.consent == nil ? "no row in iap.consumption_consent" : "iap.consumption_consent says consented = false"
            return .skip(.noConsent, detail: "account \(account): \(why)")
        }
        let delivery = facts.usage?.deliveryStatus ?? (facts.inLedger && !facts.revoked ? .delivered : .undeliveredOther)
        let sample: Bool = switch policy.sampleContent {
        case .ledger: facts.sampleInLedger
        case .always: true
        case .never: false
        }
        var notes: [String] = []
        var percentage: Int?
        if let given = facts.usage?.consumptionPercentage {
            if request.isAutoRenewable {
                notes.append("consumptionPercentage left out: never for an auto-renewable subscription")
            } else if delivery != .delivered {
                percentage = 0  // Apple's rule: 0 for what was not delivered
                if given != 0 { notes.append("consumptionPercentage sent as 0: not delivered") }
            } else {
                percentage = given
            }
        }
        var preference = consent.refundPreference ?? policy.defaultRefundPreference
        if preference == .grantProrated && !request.isAutoRenewable && !(percentage.map { 0 < $0 && $0 < 100_000 } ?? false) {
            notes.append("refundPreference GRANT_PRORATED left out: it needs a consumptionPercentage strictly between 0 and 100000")
            preference = nil
        }
        let body = ConsumptionInformation(
            deliveryStatus: delivery, sampleContentProvided: sample, consumptionPercentage: percentage, refundPreference: preference)
        return .send(body, note: notes.isEmpty ? nil : notes.joined(separator: "; "))
    }
}

/// One row of `iap.consumption_answers`, as `explain` shows it.
public struct ConsumptionAnswerRecord: Sendable, Equatable {
    public var requestedAt: Date
    public var transactionId: String
    public var reason: String?
    public var outcome: String
    public var body: String?
    public var httpStatus: Int?
    public var errorCode: Int64?
    public var detail: String?
    public var answeredAt: Date?

    public init(requestedAt: Date, transactionId: String, reason: String?, outcome: String, body: String?, httpStatus: Int?,
                errorCode: Int64?, detail: String?, answeredAt: Date?) {
        self.requestedAt = requestedAt
        self.transactionId = transactionId
        self.reason = reason
        self.outcome = outcome
        self.body = body
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.detail = detail
        self.answeredAt = answeredAt
    }
}
