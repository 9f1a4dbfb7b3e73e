import CivilCalendar
import AppStoreModels
import Hashing
import Foundation
import Postgres
import Reconciliation

/// One row of `iap.app_receipts`, as the run reads it.
public struct StoredReceipt: Sendable {
    public var id: Int64
    public var accountId: String
    public var bundleId: String?
    public let latestReceipt: String
    /// `ReceiptIdentifiers.digest` of `latestReceipt` (nil when it was too large to read): what
    /// a stored decode is matched against, and stored with a new one.
    public let blobDigest: Int64?
    public var environment: AppleEnvironment?
    /// Failed attempts since the last answer.
    public var attempts: Int
    /// Runs in a row Apple called this blob malformed (21002).
    public var malformedRuns = 0
    /// The row's `xmin` when read: a later write by the app server changes it, and then this
    /// run neither replaces the blob nor marks the newer one verified.
    public var rowVersion: String
    /// `LedgerEntry.digest` of the account's ledger rows when it last verified in full.
    public var ledgerDigest: Int64?
    /// The blob's size when it was too large to read (`latestReceipt` is empty then).
    public var oversizeBytes: Int?
    /// The original transaction ids the account's ledger and this receipt's last local decode
    /// named: where the Server API is asked about the account.
    public var knownOriginalTransactionIds: [String] = []
    /// The local decode a run stored for this very blob (its digest matches): no need to decode
    /// it again. Nil when the blob changed since, or was never decoded.
    public var storedLocalDecode: ReceiptIdentifiers?
    /// When the app stored the row (`created_at`): whether the account was the app's before the
    /// job's first night began (`Adoption`).
    public var storedAt: Date?

    public init(id: Int64, accountId: String, bundleId: String? = nil, latestReceipt: String,
                environment: AppleEnvironment? = nil, attempts: Int = 0, rowVersion: String = "", ledgerDigest: Int64? = nil,
                oversizeBytes: Int? = nil, knownOriginalTransactionIds: [String] = []) {
        self.oversizeBytes = oversizeBytes
        self.knownOriginalTransactionIds = knownOriginalTransactionIds
        self.id = id
        self.accountId = accountId
        self.bundleId = bundleId
        self.latestReceipt = latestReceipt
        self.blobDigest = latestReceipt.isEmpty ? nil : ReceiptIdentifiers.digest(ofBlob: latestReceipt)
        self.environment = environment
        self.attempts = attempts
        self.rowVersion = rowVersion
        self.ledgerDigest = ledgerDigest
    }
}

/// What the run writes back to one receipt row.
public struct ReceiptUpdate: Sendable {
    public var id: Int64
    public var rowVersion: String
    public var environment: AppleEnvironment?
    /// Set when Apple answered status 0 (or 21006 with a receipt).
    public var verifiedAt: Date?
    /// Apple's status in the final answer; nil when none came back.
    public var status: Int?
    public var nextAttemptAt: Date?
    public var attempts: Int
    /// Runs in a row Apple called the blob malformed (21002), this one included; 0 otherwise.
    public var malformedRuns = 0
    public var outcome: ReceiptOutcome
    /// Apple's fresher blob, when it differs and is valid base64.
    public var latestReceipt: String?
    /// From the local decode of the blob, when it decoded.
    public var localBundleId: String?
    public var localOriginalTransactionIds: [String]?
    /// `ReceiptIdentifiers.digest` of the blob those two come from; nil when they were not stored.
    public var localDecodeDigest: Int64?
    /// The account's ledger digest when all its receipts verified; nil clears it.
    public var ledgerDigest: Int64?
    /// The original transaction ids of the account's verified facts; nil keeps the stored ones.
    public var ledgerOriginalTransactionIds: [String]?
    /// Why this verification failed, as failures.csv says it; nil (clearing the stored one) when it verified.
    public var failure: ReceiptFailure?

    public init(id: Int64, rowVersion: String, environment: AppleEnvironment?, verifiedAt: Date?, status: Int?,
                nextAttemptAt: Date?, attempts: Int, outcome: ReceiptOutcome, latestReceipt: String?) {
        self.id = id
        self.rowVersion = rowVersion
        self.environment = environment
        self.verifiedAt = verifiedAt
        self.status = status
        self.nextAttemptAt = nextAttemptAt
        self.attempts = attempts
        self.outcome = outcome
        self.latestReceipt = latestReceipt
    }
}

/// One row for the ledger `iap.transactions`.
public struct LedgerEntry: Sendable {
    public var accountId: String
    public var transaction: Transaction
    public var environment: AppleEnvironment
    /// Who wrote the row: `iap.transactions.source`.
    public var source: LedgerSource
    /// The transaction's money terms (its own price, how it was revoked), where Apple's signed data gave them.
    public var signed: SignedTerms?
    /// When Apple gave this word, where it is current (docs/database.md, "The ledger"): a signed
    /// snapshot's `signedDate`, a live answer's time; nil for a stored, undated word (a v1
    /// notification, `receipt.in_app`), which can add a cancellation but never clear one.
    public var asOf: Date?

    public init(accountId: String, transaction: Transaction, environment: AppleEnvironment, source: LedgerSource, signed: SignedTerms? = nil,
                asOf: Date? = nil) {
        self.accountId = accountId
        self.transaction = transaction
        self.environment = environment
        self.source = source
        self.signed = signed
        self.asOf = asOf
    }

    /// The meaning of the digest. Raise it whenever the ledger's columns or what the run writes
    /// into them change: every stored digest then differs, and each account's ledger is rewritten
    /// once by its next run.
    public static let digestVersion = 6  // 3: the renewal state is part of what is written; 4: the signed money terms; 5: the signed product type; 6: the word's time (apple_as_of)

    /// FNV-1a (64 bits) over the digest's version, the account's ledger refresh window and every
    /// column the ledger upsert writes, in order: the same rows give the same digest in every
    /// process (Swift's `Hasher` is seeded per process, so it cannot serve). A new window changes
    /// the digest, so rows edited outside the job are rewritten at least once per window.
    public static func digest(_ entries: [LedgerEntry], renewals: [RenewalEntry] = [], refreshWindow: Int64 = 0,
                              version: Int = digestVersion) -> Int64 {
        var hash = FNV1a()
        func mix(_ text: String?) {
            if let text { hash.combine(text) }
            hash.combine(text == nil ? 0xFE : 0xFF)  // ends the field; nil differs from ""
        }
        func mix(_ value: (some CustomStringConvertible)?) { mix(value.map(\.description)) }
        mix(version)
        mix(refreshWindow)
        for entry in entries {
            let transaction = entry.transaction
            mix(entry.accountId)
            mix(entry.environment.rawValue)
            mix(transaction.transactionId)
            mix(transaction.originalTransactionId)
            mix(transaction.productId)
            for date in [transaction.purchaseDate, transaction.originalPurchaseDate, transaction.expiresDate,
                         transaction.cancellationDate] {
                mix(date.map { $0.timeIntervalSince1970.bitPattern })
            }
            mix(transaction.cancellationReason)
            mix(transaction.isUpgraded)
            mix(transaction.isTrialPeriod)
            mix(transaction.isInIntroOfferPeriod)
            mix(transaction.quantity)
            mix(transaction.webOrderLineItemId)
            mix(transaction.subscriptionGroupIdentifier)
            mix(transaction.offerCodeRefName)
            mix(transaction.promotionalOfferId)
            mix(transaction.inAppOwnershipType)
            mix(entry.signed?.price?.milliunits)
            mix(entry.signed?.price?.currency)
            for text in [entry.signed?.rawRevocationType, entry.signed?.rawOfferDiscountType, entry.signed?.offerPeriod,
                         entry.signed?.storefront, entry.signed?.appTransactionId, entry.signed?.rawProductType] {
                mix(text)
            }
            mix(entry.signed?.revocationPercentage)
        }
        for renewal in renewals {
            let info = renewal.info
            mix(renewal.environment.rawValue)
            mix(info.originalTransactionId)
            mix(info.productId)
            mix(info.autoRenewProductId)
            mix(info.autoRenewStatus)
            mix(info.expirationIntent)
            mix(info.gracePeriodExpiresDate.map { $0.timeIntervalSince1970.bitPattern })
            mix(info.isInBillingRetryPeriod)
        }
        return Int64(bitPattern: hash.value)
    }
}

/// One row for `iap.renewals`: the renewal state of a subscription chain as Apple last gave it.
public struct RenewalEntry: Sendable, Equatable {
    public var accountId: String
    public var environment: AppleEnvironment
    public var info: PendingRenewalInfo

    public init(accountId: String, environment: AppleEnvironment, info: PendingRenewalInfo) {
        self.accountId = accountId
        self.environment = environment
        self.info = info
    }

    /// The renewal state of verified facts, one per chain, product and environment: of two
    /// different entries for one key, the one the rules pick (it keeps access longest), so
    /// `explain` decides from what the run decided from, whatever the order of the answers.
    public static func of(_ facts: [VerifiedFacts], accountId: String) -> [RenewalEntry] {
        var index: [String: Int] = [:]
        var result: [RenewalEntry] = []
        for fact in facts {
            for info in fact.renewals {
                let key = "\(info.originalTransactionId ?? "")\u{1F}\(info.productId ?? "")\u{1F}\(fact.environment(of: info).rawValue)"
                let entry = RenewalEntry(accountId: accountId, environment: fact.environment(of: info), info: info)
                if let at = index[key] {
                    if info != result[at].info && EntitlementRules.isPreferred(info, over: result[at].info) { result[at] = entry }
                } else {
                    index[key] = result.count
                    result.append(entry)
                }
            }
        }
        return result
    }
}

/// The accounts whose renewal state a batch replaces, and the rows that replace it.
public struct RenewalReplacement: Sendable {
    public var accounts: [String] = []
    public var entries: [RenewalEntry] = []

    public init(accounts: [String] = [], entries: [RenewalEntry] = []) {
        self.accounts = accounts
        self.entries = entries
    }
}

/// How often an account's ledger is rewritten although Apple's answer did not change: the digest
/// alone cannot see rows deleted, edited or restored from an old backup behind the job's back.
/// Each account has windows of `interval`, starting at an offset of its own (from its id), so a
/// nightly run rewrites about one night's share of the accounts, not all of them every `interval`.
public struct LedgerRefresh: Sendable, Equatable {
    /// Zero: every run rewrites every ledger.
    public var interval: Duration

    public init(interval: Duration) { self.interval = interval }

    /// The account's window at `now`; nil when every run rewrites. Two instants `interval` or
    /// more apart always fall in different windows.
    public func window(accountId: String, at now: Date) -> Int64? {
        let length = interval.wholeMilliseconds
        guard length > 0 else { return nil }
        var hash = FNV1a()
        hash.combine(accountId)
        let offset = Int64(hash.value % UInt64(length))
        let milliseconds = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        return Timestamp.floorDivision(milliseconds + offset, length).quotient
    }
}

/// Which of Apple's sources wrote a ledger row last.
public enum LedgerSource: String, Sendable, CaseIterable {
    case verifyReceipt = "verify_receipt"
    case notificationV1 = "notification_v1"
    case notificationV2 = "notification_v2"
    case serverAPI = "server_api"

    /// The source that verified a transaction.
    public init(_ source: AppleSource) {
        switch source {
        case .verifyReceipt: self = .verifyReceipt
        case .serverAPI: self = .serverAPI
        }
    }
}

/// Which accounts a run takes (docs/configuration.md).
public struct AccountSelection: Sendable {
    public enum Kind: Sendable {
        /// Receipts never verified or not since `staleAfter`, and not deferred into the future;
        /// and receipts a server notification asked to re-verify.
        case due(staleAfter: Duration)
        /// A manual selection; empty lists mean "not restricted by this".
        case backfill(accounts: [String], receiptIds: [Int64], since: Date?, until: Date?, products: [String], all: Bool)
        /// Accounts a server notification asked to re-verify (`backfill --notifications-only`).
        case reverifyRequested
        /// The accounts this run planned (`iap.run_schedule`), in the plan's order.
        case scheduled(runId: Int64)
    }

    public var kind: Kind
    /// Only accounts whose hash falls in shard `index` of `count` (0-based).
    public var shard: Shard?

    public init(kind: Kind, shard: Shard? = nil) {
        self.kind = kind
        self.shard = shard
    }

    /// The notifications' own pass (`backfill --notifications-only`, or a retry alone): only the
    /// accounts they made due.
    public var isNotificationsAlone: Bool {
        if case .reverifyRequested = kind { return true }
        return false
    }
}

extension Entitlement {
    /// Reads an `iap.entitlements` row.
    init(row: PostgresRow) throws {
        guard let state = EntitlementState(rawValue: try row.decode("state", as: String.self)) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown entitlement state", column: "state")
        }
        self.init(
            accountId: try row.decode("account_id"), productId: try row.decode("product_id"),
            originalTransactionId: try row.decode("original_transaction_id"),
            latestTransactionId: try row.decode("latest_transaction_id"), state: state,
            expiresAt: try row.decode("expires_at"), gracePeriodExpiresAt: try row.decode("grace_period_expires_at"),
            autoRenew: try row.decode("auto_renew"), autoRenewProductId: try row.decode("auto_renew_product_id"),
            environment: try row.decode("environment"), ownershipType: try row.decode("ownership_type"),
            refundedAt: try row.decode("refunded_at"))
    }
}

/// One batch of a run's results, committed whole by `ReconciliationStore.commit(_:)`.
public struct BatchWrite: Sendable {
    /// The run's counts with this batch's: stored on its row in the batch's transaction.
    public var run: RunSummary
    /// The batch's number in its run, from 1, with no gap: the run's row counts the batches
    /// committed, so a batch retried after a lost acknowledgement knows it was written.
    public var sequence: Int
    public var startedAt: Date
    public var receipts: [ReceiptUpdate] = []
    public var ledger: [LedgerEntry] = []
    public var corrections: [Correction] = []
    /// The accounts whose receipts all verified: their fresh plan replaces an older one taken over.
    public var verifiedAccounts: [String] = []
    public var renewals = RenewalReplacement()
    /// Every account of the batch: their marks (`iap.unfinished_accounts`) are cleared.
    public var finishedAccounts: [String] = []
    public var isDryRun: Bool

    public init(run: RunSummary, sequence: Int, startedAt: Date, isDryRun: Bool) {
        self.run = run
        self.sequence = sequence
        self.startedAt = startedAt
        self.isDryRun = isDryRun
    }
}

/// One account as a page read it, from one snapshot: every receipt (its entitlements come from
/// all of them), its stored entitlements, and whether an earlier run left it unfinished.
public struct AccountWork: Sendable {
    public var accountId: String
    public var receipts: [StoredReceipt]
    public var stored: [Entitlement]
    /// Set when an earlier run started the account and never finished it (a suspect, verified
    /// alone last), or set it aside (quarantined).
    public var unfinished: UnfinishedAccount?

    public init(accountId: String, receipts: [StoredReceipt], stored: [Entitlement], unfinished: UnfinishedAccount? = nil) {
        self.accountId = accountId
        self.receipts = receipts
        self.stored = stored
        self.unfinished = unfinished
    }
}

extension PostgresRow {
    /// A column that holds one of the program's closed sets (a CHECK constraint keeps the table to
    /// it); a value outside it is a decoding error naming the column, never a guess.
    func decodeRawValue<Value: RawRepresentable>(_ column: String, as type: Value.Type = Value.self) throws -> Value
        where Value.RawValue == String
    {
        guard let value = Value(rawValue: try decode(column, as: String.self)) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown \(Value.self)", column: column)
        }
        return value
    }
}
