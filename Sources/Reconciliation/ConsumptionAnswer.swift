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
    /// Consent lacking when the request was examined or when its answer was about to leave (no
    /// row, `consented` false, or a holder of several without it): nothing sent (`MissingConsent`).
    case noConsent = "no_consent"
    /// Twelve hours passed since Apple asked: never sent.
    case pastDeadline = "past_deadline"
    /// Apple refused the body (a 4xx, with its `errorCode`).
    case refused
    /// Transient errors lasted past the deadline, or the process died while the request left.
    case failed
    /// No account of this app holds the transaction, or it is not in the ledger yet: examined
    /// again every run until the deadline, final after it.
    case unmatched
    /// An Advanced Commerce purchase: Send Consumption Information V2 does not take those.
    case advancedCommerce = "advanced_commerce"
    /// Apple took (202) an answer for the transaction within the last 12 hours: it has the app's answer.
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
    /// The signed transaction's `purchaseDate`: a sample counts only when it began before.
    public var purchaseDate: Date?

    public init(notificationUUID: String, transactionId: String, originalTransactionId: String?, productId: String,
                productType: SignedProductType?, subscriptionGroupIdentifier: String?, environment: AppleEnvironment, reason: String?,
                requestedAt: Date, isAdvancedCommerce: Bool, purchaseDate: Date? = nil) {
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
        self.purchaseDate = purchaseDate
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

/// What the job knows, for one request, read when it is examined and again in the transaction
/// that lets its answer leave: the app's declarations and the verified ledger.
public struct ConsumptionFacts: Sendable, Equatable {
    /// Every account whose stored receipts, ledger rows or entitlements name the transaction or its
    /// original transaction, with its consent: one Apple ID may sit under several app accounts.
    /// Empty: not ours (yet).
    public var holders: [Holder]
    /// The app's usage row for the transaction: nil when it wrote none.
    public var usage: Usage?
    /// The transaction is in the ledger (revoked or not): it was delivered, and a later refund
    /// does not undo a delivery.
    public var inLedger: Bool
    /// A free trial of the same product or subscription group began before the transaction's purchase.
    public var sampleBefore: Bool
    /// Apple took (202) an answer for this transaction, to another request, within 12 hours.
    public var answeredRecently: Bool

    public struct Holder: Sendable, Equatable {
        public var accountId: String
        /// The app's consent row: nil when it wrote none.
        public var consent: Consent?
        /// Apple's verified word names it (the account's ledger, entitlements, or Apple's answer to
        /// its receipt); false when only the receipt's own decode does (what the device sent). Such
        /// a holder must consent all the same, but nothing is written to its ledger on its strength.
        public var verified: Bool
        public init(accountId: String, consent: Consent?, verified: Bool = true) {
            self.accountId = accountId
            self.consent = consent
            self.verified = verified
        }
    }

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

    public init(holders: [Holder], usage: Usage? = nil, inLedger: Bool = false, sampleBefore: Bool = false, answeredRecently: Bool = false) {
        self.holders = holders
        self.usage = usage
        self.inLedger = inLedger
        self.sampleBefore = sampleBefore
        self.answeredRecently = answeredRecently
    }

    /// One holder, or none (`accountId` nil).
    public init(accountId: String?, consent: Consent? = nil, usage: Usage? = nil, inLedger: Bool = false, sampleBefore: Bool = false,
                answeredRecently: Bool = false) {
        self.init(holders: accountId.map { [Holder(accountId: $0, consent: consent)] } ?? [], usage: usage, inLedger: inLedger,
                  sampleBefore: sampleBefore, answeredRecently: answeredRecently)
    }

    /// The account the answer is recorded under: the first holder.
    public var accountId: String? { holders.first?.accountId }

    /// A holder said no (`consented` false): an answer withheld for it is withheld for good, alone
    /// or among several holders; only a missing row is waited for.
    public var anyDeclined: Bool { holders.contains { $0.consent?.consented == false } }
}

/// Why nothing is sent for want of consent (`why` in `iap.consumption_answers`).
public enum MissingConsent: String, Sendable, CaseIterable {
    /// The holder's account has no row in `iap.consumption_consent` (none written, or deleted).
    case noRow = "no_consent_row"
    /// Its row says `consented` false (never given, or withdrawn).
    case consentedFalse = "consented_false"
    /// Several accounts hold the transaction and not every one consented.
    case ambiguousHolder = "ambiguous_holder"
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
/// request, the facts and the policy, so that every rule is held by a table test. Made when the
/// request is examined and made again, on facts read again, in the transaction that lets the
/// answer leave: what is sent is what holds at that moment.
public enum ConsumptionDecision: Sendable, Equatable {
    /// Send this body; `note` says what was left out and why, for the record.
    case send(ConsumptionInformation, note: String?)
    /// Send nothing: the outcome and why.
    case skip(ConsumptionOutcome, detail: String)
    /// Send nothing, for want of consent: which want, and why.
    case noConsent(MissingConsent, detail: String)

    /// For `no_consent`: why, as recorded.
    public var missingConsent: MissingConsent? {
        if case .noConsent(let missing, _) = self { missing } else { nil }
    }

    /// The outcome recorded: `pending` for a body to send.
    public var outcome: ConsumptionOutcome {
        switch self {
        case .send: .pending
        case .skip(let outcome, _): outcome
        case .noConsent: .noConsent
        }
    }

    public static func decide(_ request: ConsumptionRequest, _ facts: ConsumptionFacts, policy: ConsumptionPolicy, now: Date) -> Self {
        if request.isAdvancedCommerce {
            return .skip(.advancedCommerce, detail: "an Advanced Commerce purchase: Send Consumption Information V2 does not take it")
        }
        guard now < request.deadline.addingTimeInterval(-policy.deadlineMargin) else {
            return .skip(.pastDeadline, detail: "Apple asked at \(request.requestedAt); its 12 hours ended at \(request.deadline)")
        }
        guard !facts.holders.isEmpty else {
            return .skip(.unmatched, detail: "no account of this app names transaction \(request.transactionId) or its original transaction yet")
        }
        if facts.answeredRecently {
            return .skip(.answeredAlready, detail: "Apple took an answer for transaction \(request.transactionId) in the last 12 hours")
        }
        let lacking = facts.holders.filter { $0.consent?.consented != true }
        if let first = lacking.first {
            let why = lacking.map { "account \($0.accountId): " + ($0.consent == nil ? "no row in iap.consumption_consent" : "consented = false") }
            if facts.holders.count > 1 {
                let all = facts.holders.map(\.accountId).joined(separator: ", ")
                return .noConsent(.ambiguousHolder, detail: "accounts \(all) hold the transaction and all must consent; " + why.joined(separator: "; "))
            }
            return .noConsent(first.consent == nil ? .noRow : .consentedFalse, detail: why[0])
        }
        // The app's declaration, else the ledger: a delivery is a fact of the past (a later refund
        // does not undo it), and a transaction not in the ledger yet is no evidence of anything.
        let delivery: ConsumptionInformation.DeliveryStatus
        if let declared = facts.usage?.deliveryStatus {
            delivery = declared
        } else if facts.inLedger {
            delivery = .delivered
        } else {
            return .skip(.unmatched, detail: "transaction \(request.transactionId) is not in the ledger yet, and the app declared no delivery status")
        }
        let sample: Bool = switch policy.sampleContent {
        case .ledger: facts.sampleBefore
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
        // Every holder's preference (its row's, else the default), sent only when they agree.
        let preferences = facts.holders.map { $0.consent?.refundPreference ?? policy.defaultRefundPreference }
        var preference = preferences[0]
        if preferences.contains(where: { $0 != preference }) {
            notes.append("refundPreference left out: the holders' preferences differ")
            preference = nil
        }
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
    /// For `no_consent`: `MissingConsent`'s word.
    public var why: String?
    /// Every account that held the transaction when it was last decided.
    public var holders: [String]
    public var body: String?
    public var httpStatus: Int?
    public var errorCode: Int64?
    public var detail: String?
    public var answeredAt: Date?

    public init(requestedAt: Date, transactionId: String, reason: String?, outcome: String, why: String? = nil, holders: [String] = [],
                body: String?, httpStatus: Int?, errorCode: Int64?, detail: String?, answeredAt: Date?) {
        self.requestedAt = requestedAt
        self.transactionId = transactionId
        self.reason = reason
        self.outcome = outcome
        self.why = why
        self.holders = holders
        self.body = body
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.detail = detail
        self.answeredAt = answeredAt
    }
}
