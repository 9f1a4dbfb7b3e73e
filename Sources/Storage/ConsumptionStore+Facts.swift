import AppStoreModels
import Foundation
import Postgres
import Reconciliation

/// What the job knows for one request (docs/consumption.md, "The body"), read when the request is
/// examined and again in the transaction that lets its answer leave.
extension ConsumptionStore {
    /// The holders of the request's transaction and their consent, the app's usage row, and what
    /// the ledger knows.
    public func facts(for request: ConsumptionRequest, now: Date) async throws -> ConsumptionFacts {
        try await Self.facts(for: request, now: now, on: connection)
    }

    /// The holders' consent rows are locked `FOR SHARE` until the transaction ends (in
    /// `claimForSending`), so that what was read holds when the answer is marked to leave.
    static func facts(for request: ConsumptionRequest, now: Date, on connection: PostgresConnection) async throws
        -> ConsumptionFacts
    {
        let ids = Array(Set([request.transactionId, request.originalTransactionId].compactMap { $0 }))
        // Every account whose ledger rows, entitlements or stored receipts (Apple's answer to the
        // receipt, or the receipt's own decode) name the transaction or its original: the ledger's
        // first. Only the receipt's own decode is unverified (the app stored what the device sent).
        let named = try await connection.query("""
            SELECT account_id, min(rank) AS rank FROM (
                SELECT account_id, 0 AS rank FROM iap.transactions WHERE transaction_id = ANY(\(ids)) OR original_transaction_id = ANY(\(ids))
                UNION ALL
                SELECT account_id, 1 FROM iap.entitlements WHERE original_transaction_id = ANY(\(ids))
                UNION ALL
                SELECT account_id, 2 FROM iap.app_receipts WHERE ledger_original_transaction_ids && \(ids)::text[]
                UNION ALL
                SELECT account_id, 3 FROM iap.app_receipts WHERE receipt_original_transaction_ids && \(ids)::text[]
            ) named GROUP BY account_id ORDER BY min(rank), account_id
            """).map { (account: try $0.decode("account_id", as: String.self), verified: try $0.decode("rank", as: Int32.self) < 3) }
        let holders = named.map(\.account)
        let consents: [String: ConsumptionFacts.Consent] = Dictionary(uniqueKeysWithValues: try await connection.query("""
            SELECT account_id, consented, refund_preference FROM iap.consumption_consent WHERE account_id = ANY(\(holders))
            FOR SHARE
            """).map { row in
            (try row.decode("account_id", as: String.self), ConsumptionFacts.Consent(
                consented: try row.decode("consented"),
                refundPreference: try row.decode("refund_preference", as: String?.self).flatMap(ConsumptionInformation.RefundPreference.init(rawValue:))))
        })
        let since = now.addingTimeInterval(-ConsumptionRequest.answerWindow)
        let row = try await connection.query("""
            SELECT u.consumption_percentage, u.delivery_status, (u.transaction_id IS NOT NULL) AS has_usage,
                   EXISTS (SELECT 1 FROM iap.transactions WHERE transaction_id = \(request.transactionId)) AS in_ledger,
                   -- A free trial (verifyReceipt's is_trial_period, Apple's signed FREE_TRIAL) begun before
                   -- this purchase, in its environment: in its own chain (one Apple ID's subscription in
                   -- one group keeps its original transaction), or of the same product or group in the
                   -- ledger of a holder Apple's word names, never on a stored receipt's say-so. A paid
                   -- introductory offer is no sample.
                   EXISTS (SELECT 1 FROM iap.transactions t
                           WHERE (t.original_transaction_id = \(request.originalTransactionId ?? request.transactionId)
                                  OR (t.account_id = ANY(\(named.filter(\.verified).map(\.account)))
                                      AND (t.product_id = \(request.productId)
                                           OR (\(request.subscriptionGroupIdentifier)::text IS NOT NULL
                                               AND t.subscription_group_identifier = \(request.subscriptionGroupIdentifier)))))
                             AND t.environment = \(request.environment.rawValue)
                             AND (t.is_trial_period IS TRUE OR t.offer_discount_type = 'FREE_TRIAL')
                             AND t.purchase_date < \(request.purchaseDate)) AS sample,
                   -- Apple took an answer for the transaction (to another request) within 12 hours.
                   EXISTS (SELECT 1 FROM iap.consumption_answers a
                           WHERE a.transaction_id = \(request.transactionId) AND a.notification_uuid <> \(request.notificationUUID)
                             AND a.outcome = 'sent' AND a.answered_at > \(since)) AS answered
            FROM (SELECT 1) AS one
            LEFT JOIN iap.consumption_usage u ON u.transaction_id = \(request.transactionId)
            """)[0]
        let usage: ConsumptionFacts.Usage? = try row.decode("has_usage", as: Bool.self)
            ? ConsumptionFacts.Usage(
                consumptionPercentage: try row.decode("consumption_percentage"),
                deliveryStatus: try row.decode("delivery_status", as: String?.self).flatMap(ConsumptionInformation.DeliveryStatus.init(rawValue:)))
            : nil
        return ConsumptionFacts(
            holders: named.map { ConsumptionFacts.Holder(accountId: $0.account, consent: consents[$0.account], verified: $0.verified) }, usage: usage,
            inLedger: try row.decode("in_ledger"), sampleBefore: try row.decode("sample"), answeredRecently: try row.decode("answered"))
    }

    /// What `claimForSending` did with a pending answer.
    public enum Claim: Sendable, Equatable {
        /// Marked `sending`, committed: send exactly this body now, once.
        case send(body: String)
        /// Decided again, it is not sent: the decision recorded.
        case withheld(ConsumptionDecision)
        /// No longer pending (another process, or an earlier step, ended it).
        case gone
    }

    /// Decides a pending answer again on facts read in this transaction, holders' consent rows
    /// locked: a body to send is marked `sending` and committed before its request leaves, so what
    /// leaves is what held at that moment. Consent lacking ends it `no_consent`; every other
    /// pending answer is decided again the same way when its turn comes, so nothing more leaves
    /// for a customer who withdrew.
    public func claimForSending(_ id: Int64, now: Date, decide: @Sendable (ConsumptionRequest, ConsumptionFacts) -> ConsumptionDecision)
        async throws -> Claim
    {
        try await connection.withTransaction { connection in
            guard let row = try await connection.query("""
                SELECT notification_uuid, transaction_id, original_transaction_id, product_id, product_type, subscription_group_identifier,
                       environment, reason, requested_at, purchase_date
                FROM iap.consumption_answers WHERE id = \(id) AND outcome = 'pending' FOR UPDATE
                """).first else { return .gone }
            let request = ConsumptionRequest(
                notificationUUID: try row.decode("notification_uuid"), transactionId: try row.decode("transaction_id"),
                originalTransactionId: try row.decode("original_transaction_id"), productId: try row.decode("product_id", as: String?.self) ?? "",
                productType: try row.decode("product_type", as: String?.self).flatMap(SignedProductType.init(rawValue:)),
                subscriptionGroupIdentifier: try row.decode("subscription_group_identifier"),
                environment: AppleEnvironment(rawValue: try row.decode("environment")) ?? .production, reason: try row.decode("reason"),
                requestedAt: try row.decode("requested_at"), isAdvancedCommerce: false, purchaseDate: try row.decode("purchase_date"))
            let facts = try await Self.facts(for: request, now: now, on: connection)
            let decision = decide(request, facts)
            let (body, detail, why) = Self.columns(decision)
            if case .send = decision, let body {
                try await connection.execute("""
                    UPDATE iap.consumption_answers
                    SET outcome = 'sending', body = \(body), detail = \(detail), attempts = attempts + 1, answered_at = \(now),
                        account_id = \(facts.accountId), holders = \(facts.holders.map(\.accountId))
                    WHERE id = \(id)
                    """)
                return .send(body: body)
            }
            try await connection.execute("""
                UPDATE iap.consumption_answers
                SET outcome = \(decision.outcome.rawValue), why = \(why), body = NULL, detail = \(detail), answered_at = \(now),
                    account_id = \(facts.accountId), holders = \(facts.holders.map(\.accountId))
                WHERE id = \(id)
                """)
            return .withheld(decision)
        }
    }
}
