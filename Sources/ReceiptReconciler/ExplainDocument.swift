import AppStoreModels
import Foundation
import Reconciliation

/// `explain --json`: the documented shape (docs/explain.md) as `Encodable` views, key by key, so
/// the table there and this file can be read side by side. Every key is always present: an
/// absent value is `null` (`@Nullable`), never a missing key.
struct ExplainDocument: Encodable {
    let accountId: String
    let asOf: Date
    /// The app's access was never imported and the account was stored before the first night
    /// began: the decisions count a first row granting nothing as a revoke.
    let firstNight: Bool
    let standing: Standing
    let decisions: [Decision]
    let receipts: [Receipt]
    let ledger: [LedgerRow]
    let renewals: [Renewal]
    let corrections: [PastCorrection]
    @Nullable var quarantine: Quarantine?
    let quarantinedNotificationIds: [Int64]
    let notifications: [Notification]
    let money: [MoneyEvent]
    let consumptionRequests: [ConsumptionAnswer]

    enum CodingKeys: String, CodingKey {
        case accountId = "account_id", asOf = "as_of", firstNight = "first_night", standing, decisions, receipts, ledger, renewals, corrections, quarantine
        case quarantinedNotificationIds = "quarantined_notification_ids", notifications, money
        case consumptionRequests = "consumption_requests"
    }

    /// One CONSUMPTION_REQUEST and its answer (docs/consumption.md, "Outcomes").
    struct ConsumptionAnswer: Encodable {
        let requestedAt: Date
        let transactionId: String
        @Nullable var reason: String?
        let outcome: String
        @Nullable var why: String?
        let holders: [String]
        @Nullable var body: String?
        @Nullable var httpStatus: Int?
        @Nullable var errorCode: Int64?
        @Nullable var detail: String?
        @Nullable var answeredAt: Date?

        enum CodingKeys: String, CodingKey {
            case requestedAt = "requested_at", transactionId = "transaction_id", reason, outcome, why, holders, body, httpStatus = "http_status"
            case errorCode = "error_code", detail, answeredAt = "answered_at"
        }

        init(_ record: ConsumptionAnswerRecord) {
            requestedAt = record.requestedAt
            transactionId = record.transactionId
            reason = record.reason
            outcome = record.outcome
            why = record.why
            holders = record.holders
            body = record.body
            httpStatus = record.httpStatus
            errorCode = record.errorCode
            detail = record.detail
            answeredAt = record.answeredAt
        }
    }

    /// One event of the finance journal; amounts as money text, as the CSV writes them.
    struct MoneyEvent: Encodable {
        let event: String
        let eventTime: Date
        let transactionId: String
        let productId: String
        @Nullable var amount: String?
        @Nullable var currency: String?
        let amountSource: String
        @Nullable var revocationType: String?
        @Nullable var revocationPercentage: Int?
        let recordedAt: Date
        /// The event an adjustment corrects.
        @Nullable var adjusts: String?

        enum CodingKeys: String, CodingKey {
            case event, eventTime = "event_time", transactionId = "transaction_id", productId = "product_id", amount, currency
            case amountSource = "amount_source", revocationType = "revocation_type", revocationPercentage = "revocation_percentage"
            case recordedAt = "recorded_at", adjusts
        }

        init(_ event: FinanceEvent) {
            self.event = event.kind.rawValue
            eventTime = event.time
            transactionId = event.transactionId
            productId = event.productId
            amount = event.amount.map(MoneyText.decimal(milliunits:))
            currency = event.currency
            amountSource = event.amountSource.rawValue
            revocationType = event.revocationType
            revocationPercentage = event.revocationPercentage
            recordedAt = event.recordedAt
            adjusts = event.adjusts?.rawValue
        }
    }

    init(_ evidence: AccountEvidence, _ decisions: [ProductDecision], now: Date, isFirstNight: Bool = false) {
        accountId = evidence.accountId
        asOf = now
        firstNight = isFirstNight
        standing = Standing(AccountStanding(receipts: evidence.receipts))
        self.decisions = decisions.map(Decision.init)
        receipts = evidence.receipts.map(Receipt.init)
        ledger = evidence.ledger.map(LedgerRow.init)
        renewals = evidence.renewals.map(Renewal.init)
        corrections = evidence.corrections.map(PastCorrection.init)
        quarantine = evidence.quarantine.map { Quarantine(since: $0.since, reason: $0.reason) }
        quarantinedNotificationIds = evidence.quarantinedNotificationIds
        notifications = evidence.notifications.map(Notification.init)
        money = evidence.moneyEvents.map(MoneyEvent.init)
        consumptionRequests = evidence.consumptionAnswers.map(ConsumptionAnswer.init)
    }

    struct Standing: Encodable {
        let state: String
        let verified: Bool
        let receiptsFailing: [Int64]
        let receiptsNeverSent: [Int64]

        enum CodingKeys: String, CodingKey {
            case state, verified, receiptsFailing = "receipts_failing", receiptsNeverSent = "receipts_never_sent"
        }

        init(_ standing: AccountStanding) {
            switch standing {
            case .verified: (state, verified, receiptsFailing, receiptsNeverSent) = ("verified", true, [], [])
            case .noReceipts: (state, verified, receiptsFailing, receiptsNeverSent) = ("no_receipts", false, [], [])
            case .unverified(let failing, let neverSent):
                (state, verified, receiptsFailing, receiptsNeverSent) = ("unverified", false, failing.map(\.id), neverSent.map(\.id))
            }
        }
    }

    struct Decision: Encodable {
        struct VerdictView: Encodable {
            let access: Bool
            let text: String
        }
        struct NextRun: Encodable {
            let kind: String
            let reason: String
        }

        let productId: String
        let type: String
        let typeFrom: String
        let verdict: VerdictView
        @Nullable var decided: EntitlementView?
        @Nullable var stored: EntitlementView?
        let why: [String]
        let agrees: Bool
        let heldByExpiryLag: Bool
        @Nullable var nextRun: NextRun?

        enum CodingKeys: String, CodingKey {
            case productId = "product_id", type, typeFrom = "type_from", verdict, decided, stored, why, agrees
            case heldByExpiryLag = "held_by_expiry_lag", nextRun = "next_run"
        }

        init(_ decision: ProductDecision) {
            productId = decision.productId
            type = decision.type.rawValue
            typeFrom = decision.typeFrom
            verdict = VerdictView(access: decision.verdict.hasAccess, text: decision.verdict.text)
            decided = decision.decided.map(EntitlementView.init)
            stored = decision.stored.map(EntitlementView.init)
            why = decision.why
            agrees = decision.nextRun == nil
            heldByExpiryLag = decision.heldByExpiryLag
            nextRun = decision.nextRun.map { NextRun(kind: $0.kind.rawValue, reason: $0.reason) }
        }
    }

    struct EntitlementView: Encodable {
        let state: String
        let entitled: Bool
        @Nullable var expiresAt: Date?
        @Nullable var gracePeriodExpiresAt: Date?
        @Nullable var refundedAt: Date?
        let originalTransactionId: String
        @Nullable var latestTransactionId: String?
        @Nullable var autoRenew: Bool?
        @Nullable var autoRenewProductId: String?
        @Nullable var environment: String?
        @Nullable var ownershipType: String?

        enum CodingKeys: String, CodingKey {
            case state, entitled, expiresAt = "expires_at", gracePeriodExpiresAt = "grace_period_expires_at", refundedAt = "refunded_at"
            case originalTransactionId = "original_transaction_id", latestTransactionId = "latest_transaction_id"
            case autoRenew = "auto_renew", autoRenewProductId = "auto_renew_product_id", environment, ownershipType = "ownership_type"
        }

        init(_ entitlement: Entitlement) {
            state = entitlement.state.rawValue
            entitled = entitlement.entitled
            expiresAt = entitlement.expiresAt
            gracePeriodExpiresAt = entitlement.gracePeriodExpiresAt
            refundedAt = entitlement.refundedAt
            originalTransactionId = entitlement.originalTransactionId
            latestTransactionId = entitlement.latestTransactionId
            autoRenew = entitlement.autoRenew
            autoRenewProductId = entitlement.autoRenewProductId
            environment = entitlement.environment
            ownershipType = entitlement.ownershipType
        }
    }

    struct Receipt: Encodable {
        struct Failure: Encodable {
            let reason: String
            let attempts: Int
            let endpoints: String
        }

        let id: Int64
        @Nullable var environment: String?
        @Nullable var lastStatus: Int?
        @Nullable var lastOutcome: String?
        @Nullable var lastVerifiedAt: Date?
        @Nullable var nextAttemptAt: Date?
        let failedRuns: Int
        @Nullable var lastFailure: Failure?
        @Nullable var localBundleId: String?
        @Nullable var localOriginalTransactionIds: [String]?

        enum CodingKeys: String, CodingKey {
            case id, environment, lastStatus = "last_status", lastOutcome = "last_outcome", lastVerifiedAt = "last_verified_at"
            case nextAttemptAt = "next_attempt_at", failedRuns = "failed_runs", lastFailure = "last_failure"
            case localBundleId = "local_bundle_id", localOriginalTransactionIds = "local_original_transaction_ids"
        }

        init(_ receipt: AccountEvidence.Receipt) {
            id = receipt.id
            environment = receipt.environment
            lastStatus = receipt.lastStatus
            lastOutcome = receipt.lastOutcome
            lastVerifiedAt = receipt.lastVerifiedAt
            nextAttemptAt = receipt.nextAttemptAt
            failedRuns = receipt.attempts
            lastFailure = receipt.lastFailure.map { Failure(reason: $0.reason, attempts: $0.attempts, endpoints: $0.endpoints) }
            localBundleId = receipt.localBundleId
            localOriginalTransactionIds = receipt.localOriginalTransactionIds
        }
    }

    struct LedgerRow: Encodable {
        let transactionId: String
        @Nullable var originalTransactionId: String?
        let productId: String
        @Nullable var purchaseDate: Date?
        @Nullable var expiresDate: Date?
        @Nullable var cancellationDate: Date?
        @Nullable var cancellationReason: Int?
        @Nullable var isUpgraded: Bool?
        @Nullable var ownershipType: String?
        let environment: String
        let source: String

        enum CodingKeys: String, CodingKey {
            case transactionId = "transaction_id", originalTransactionId = "original_transaction_id", productId = "product_id"
            case purchaseDate = "purchase_date", expiresDate = "expires_date", cancellationDate = "cancellation_date"
            case cancellationReason = "cancellation_reason", isUpgraded = "is_upgraded", ownershipType = "ownership_type", environment, source
        }

        init(_ row: AccountEvidence.LedgerTransaction) {
            let transaction = row.transaction
            transactionId = transaction.transactionId
            originalTransactionId = transaction.originalTransactionId
            productId = transaction.productId
            purchaseDate = transaction.purchaseDate
            expiresDate = transaction.expiresDate
            cancellationDate = transaction.cancellationDate
            cancellationReason = transaction.cancellationReason
            isUpgraded = transaction.isUpgraded
            ownershipType = transaction.inAppOwnershipType
            environment = row.environment.rawValue
            source = row.source
        }
    }

    struct Renewal: Encodable {
        @Nullable var originalTransactionId: String?
        @Nullable var productId: String?
        @Nullable var autoRenewStatus: Bool?
        @Nullable var autoRenewProductId: String?
        @Nullable var isInBillingRetryPeriod: Bool?
        @Nullable var gracePeriodExpiresDate: Date?
        @Nullable var expirationIntent: Int?
        let environment: String

        enum CodingKeys: String, CodingKey {
            case originalTransactionId = "original_transaction_id", productId = "product_id", autoRenewStatus = "auto_renew_status"
            case autoRenewProductId = "auto_renew_product_id", isInBillingRetryPeriod = "is_in_billing_retry_period"
            case gracePeriodExpiresDate = "grace_period_expires_date", expirationIntent = "expiration_intent", environment
        }

        init(_ renewal: AccountEvidence.Renewal) {
            originalTransactionId = renewal.info.originalTransactionId
            productId = renewal.info.productId
            autoRenewStatus = renewal.info.autoRenewStatus
            autoRenewProductId = renewal.info.autoRenewProductId
            isInBillingRetryPeriod = renewal.info.isInBillingRetryPeriod
            gracePeriodExpiresDate = renewal.info.gracePeriodExpiresDate
            expirationIntent = renewal.info.expirationIntent
            environment = renewal.environment.rawValue
        }
    }

    struct PastCorrection: Encodable {
        let runId: Int64
        @Nullable var runStartedAt: Date?
        let productId: String
        let kind: String
        let status: String
        @Nullable var appliedAt: Date?
        let reason: String
        /// Planned by a dry run: never applied.
        let dryRun: Bool

        enum CodingKeys: String, CodingKey {
            case runId = "run_id", runStartedAt = "run_started_at", productId = "product_id", kind, status, appliedAt = "applied_at", reason
            case dryRun = "dry_run"
        }

        init(_ correction: AccountEvidence.PastCorrection) {
            runId = correction.runId
            runStartedAt = correction.runStartedAt
            productId = correction.productId
            kind = correction.kind.rawValue
            status = correction.status.rawValue
            appliedAt = correction.appliedAt
            reason = correction.reason
            dryRun = correction.isDryRun
        }
    }

    struct Quarantine: Encodable {
        let since: Date
        let reason: String
    }

    struct Notification: Encodable {
        let id: Int64
        let receivedAt: Date
        let type: String
        @Nullable var outcome: String?
        @Nullable var processedAt: Date?
        @Nullable var reason: String?

        enum CodingKeys: String, CodingKey {
            case id, receivedAt = "received_at", type, outcome, processedAt = "processed_at", reason
        }

        init(_ notification: AccountEvidence.NotificationRecord) {
            id = notification.id
            receivedAt = notification.receivedAt
            type = notification.type
            outcome = notification.outcome
            processedAt = notification.processedAt
            reason = notification.reason
        }
    }
}
