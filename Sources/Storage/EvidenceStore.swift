import AppStoreModels
import Foundation
import Postgres
import Reconciliation

/// The SQL of `explain`: everything the job stored about one account, read in one transaction
/// so the parts agree with each other.
public struct EvidenceStore: Sendable {
    /// Storage's alone: every statement and transaction on it is written here, never by a caller.
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Ends the session; later calls fail with `connectionClosed`.
    public func close() async {
        await connection.close()
    }

    public func evidence(of accountId: String) async throws -> AccountEvidence {
        try await connection.withTransaction(.snapshotReadOnly) { connection in
            var evidence = AccountEvidence(accountId: accountId)
            evidence.receipts = try await connection.query("""
                SELECT id, environment, last_status, last_outcome, last_verified_at, next_attempt_at, attempts,
                       last_failure_reason, last_failure_attempts, last_failure_endpoints,
                       receipt_bundle_id, array_to_string(receipt_original_transaction_ids, ' ') AS originals
                FROM iap.app_receipts WHERE account_id = \(accountId) ORDER BY id
                """).map { row in
                var receipt = AccountEvidence.Receipt(
                    id: try row.decode("id"), environment: try row.decode("environment"), lastStatus: try row.decode("last_status"),
                    lastOutcome: try row.decode("last_outcome"), lastVerifiedAt: try row.decode("last_verified_at"),
                    nextAttemptAt: try row.decode("next_attempt_at"), attempts: try row.decode("attempts"),
                    localBundleId: try row.decode("receipt_bundle_id"),
                    localOriginalTransactionIds: try row.decode("originals", as: String?.self).map { $0.split(separator: " ").map(String.init) })
                if let reason: String = try row.decode("last_failure_reason") {
                    receipt.lastFailure = ReceiptFailure(
                        reason: reason, attempts: try row.decode("last_failure_attempts", as: Int?.self) ?? 0,
                        endpoints: try row.decode("last_failure_endpoints", as: String?.self) ?? "")
                }
                return receipt
            }
            evidence.ledger = try await connection.query("""
                SELECT * FROM iap.transactions WHERE account_id = \(accountId)
                ORDER BY product_id, original_transaction_id, purchase_date DESC NULLS LAST, transaction_id
                """).map { row in
                AccountEvidence.LedgerTransaction(
                    transaction: Transaction(
                        transactionId: try row.decode("transaction_id"), originalTransactionId: try row.decode("original_transaction_id"),
                        productId: try row.decode("product_id"), quantity: try row.decode("quantity"),
                        purchaseDate: try row.decode("purchase_date"), originalPurchaseDate: try row.decode("original_purchase_date"),
                        expiresDate: try row.decode("expires_date"), cancellationDate: try row.decode("cancellation_date"),
                        cancellationReason: try row.decode("cancellation_reason"), isUpgraded: try row.decode("is_upgraded"),
                        isTrialPeriod: try row.decode("is_trial_period"), isInIntroOfferPeriod: try row.decode("is_in_intro_offer_period"),
                        webOrderLineItemId: try row.decode("web_order_line_item_id"),
                        subscriptionGroupIdentifier: try row.decode("subscription_group_identifier"),
                        offerCodeRefName: try row.decode("offer_code_ref_name"), promotionalOfferId: try row.decode("promotional_offer_id"),
                        inAppOwnershipType: try row.decode("ownership_type")),
                    environment: AppleEnvironment(appleName: try row.decode("environment", as: String?.self)) ?? .production,
                    source: try row.decode("source", as: String?.self) ?? LedgerSource.verifyReceipt.rawValue,
                    rawSignedProductType: try row.decode("signed_product_type"))
            }
            evidence.renewals = try await connection.query("""
                SELECT * FROM iap.renewals WHERE account_id = \(accountId) ORDER BY environment, original_transaction_id, product_id
                """).map { row in
                let original: String = try row.decode("original_transaction_id")
                let product: String = try row.decode("product_id")
                return AccountEvidence.Renewal(
                    environment: AppleEnvironment(appleName: try row.decode("environment", as: String.self)) ?? .production,
                    info: PendingRenewalInfo(
                        originalTransactionId: original.isEmpty ? nil : original, productId: product.isEmpty ? nil : product,
                        autoRenewProductId: try row.decode("auto_renew_product_id"), autoRenewStatus: try row.decode("auto_renew_status"),
                        expirationIntent: try row.decode("expiration_intent"),
                        gracePeriodExpiresDate: try row.decode("grace_period_expires_date"),
                        isInBillingRetryPeriod: try row.decode("is_in_billing_retry_period")))
            }
            evidence.entitlements = try await connection.query(
                "SELECT * FROM iap.entitlements WHERE account_id = \(accountId) ORDER BY product_id").map { try Entitlement(row: $0) }
            evidence.corrections = try await connection.query("""
                SELECT c.run_id, r.started_at, r.dry_run, c.product_id, c.kind, c.reason, c.status, c.applied_at
                FROM iap.corrections c JOIN iap.reconciliation_runs r ON r.id = c.run_id
                WHERE c.account_id = \(accountId) ORDER BY c.id DESC
                """).map { row in
                AccountEvidence.PastCorrection(
                    runId: try row.decode("run_id"), runStartedAt: try row.decode("started_at"), productId: try row.decode("product_id"),
                    kind: try row.decodeRawValue("kind"), reason: try row.decode("reason"), status: try row.decodeRawValue("status"),
                    appliedAt: try row.decode("applied_at"), isDryRun: try row.decode("dry_run"))
            }
            evidence.notifications = try await connection.query("""
                SELECT id, received_at, processed_at, outcome, reason, body->>'notification_type' AS v1_type,
                       body->>'signedPayload' AS signed_payload
                FROM iap.notifications WHERE account_id = \(accountId) ORDER BY received_at DESC, id DESC
                """).map { row in
                let outcome: String? = try row.decode("outcome")
                return AccountEvidence.NotificationRecord(
                    id: try row.decode("id"), receivedAt: try row.decode("received_at"), processedAt: try row.decode("processed_at"),
                    type: Self.type(v1: try row.decode("v1_type"), signedPayload: try row.decode("signed_payload"), outcome: outcome),
                    outcome: outcome, reason: try row.decode("reason"))
            }
            evidence.quarantine = try await connection.query("""
                SELECT quarantined_at, quarantine_reason FROM iap.unfinished_accounts
                WHERE account_id = \(accountId) AND quarantined_at IS NOT NULL
                """).first.map { AccountEvidence.Quarantine(since: try $0.decode("quarantined_at"), reason: try $0.decode("quarantine_reason")) }
            evidence.moneyEvents = try await FinanceLedger.events(accountId: accountId, connection: connection)
            evidence.consumptionAnswers = try await connection.query("""
                SELECT requested_at, transaction_id, reason, outcome, why, to_json(holders)::text AS holders, body, http_status, error_code, detail, answered_at
                FROM iap.consumption_answers WHERE account_id = \(accountId) OR holders @> ARRAY[\(accountId)]::text[] ORDER BY requested_at DESC, id DESC
                """).map { row in
                ConsumptionAnswerRecord(
                    requestedAt: try row.decode("requested_at"), transactionId: try row.decode("transaction_id"), reason: try row.decode("reason"),
                    outcome: try row.decode("outcome"), why: try row.decode("why"), holders: (try? JSONDecoder().decode([String].self, from: Data(try row.decode("holders", as: String.self).utf8))) ?? [], body: try row.decode("body"), httpStatus: try row.decode("http_status"),
                    errorCode: try row.decode("error_code"), detail: try row.decode("detail"), answeredAt: try row.decode("answered_at"))
            }
            evidence.quarantinedNotificationIds = try await connection.query("""
                SELECT id FROM iap.notifications WHERE quarantined_at IS NOT NULL ORDER BY id
                """).map { try $0.decode("id") }
            return evidence
        }
    }

    /// `v1 TYPE`, or `v2 TYPE/SUBTYPE` read from a payload the run verified; a payload the run
    /// rejected is not read for its type.
    static func type(v1: String?, signedPayload: String?, outcome: String?) -> String {
        if let v1 { return "v1 \(v1)" }
        guard let signedPayload else { return "unknown" }
        guard outcome != nil, outcome != "rejected", let jws = try? CompactJWS(signedPayload),
              let payload = try? NotificationV2Payload(json: jws.payload)
        else { return "v2 (unverified)" }
        return payload.label
    }
}
