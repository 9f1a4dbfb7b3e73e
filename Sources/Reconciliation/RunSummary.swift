import AppStoreModels
import CivilCalendar
import Foundation

/// What a run is: the nightly run over due accounts, or a manual backfill.
public enum RunKind: String, Sendable, Codable {
    case nightly, backfill
}

/// Where a run is; its row's `status`.
public enum RunStatus: String, Sendable, Codable, CaseIterable {
    case running, completed, failed, interrupted, aborted
}

/// How a server notification was processed; its row's `outcome`.
public enum NotificationOutcome: String, Sendable, Codable, CodingKeyRepresentable, CaseIterable {
    case applied, rejected, unmatched, invalid
    /// Processed with nothing to apply: a V2 `TEST`, or a type that names no transaction.
    case recorded
    /// A V2 notification whose notificationUUID was applied already.
    case duplicate
}

/// One environment's read of Get Notification History in a run: the window, what came, what was new.
public struct NotificationHistoryRead: Sendable, Codable, Equatable {
    public var environment: String
    public var from: Date
    public var to: Date
    public var pages = 0
    public var requests = 0
    /// Signed payloads Apple listed, and those not stored before (the app server missed them, or
    /// they are new since the last read).
    public var received = 0
    public var stored = 0
    /// Every page was read and stored: the watermark moved to `to`.
    public var complete = false
    public var error: String?
    /// Slices stored whole this run (the watermark moved at the end of each), and where it stands.
    public var slices = 0
    public var readUntil: Date?
    /// The run took up a slice an earlier run left halfway, at its paginationToken.
    public var resumed = false
    /// What Apple no longer serves (past 180 days, 30 in the sandbox) that the watermark had not
    /// reached: notifications of that time nobody stored cannot be read from Apple any more.
    public var unreachableFrom: Date?
    public var unreachableUntil: Date?

    public init(environment: String, from: Date, to: Date) {
        self.environment = environment
        self.from = from
        self.to = to
    }

    /// What Apple no longer serves, with its size, in a sentence.
    public var unreachableLine: String {
        guard let from = unreachableFrom, let until = unreachableUntil else { return "" }
        let days = until.timeIntervalSince(from) / 86_400
        return "\(environment) from \(Timestamp.format(from)) to \(Timestamp.format(until)) "
            + "(\(String(format: "%.1f", days)) days) is past what Apple serves (\(environment == "Sandbox" ? 30 : 180) days): "
            + "a notification of that time the app server did not store cannot be read from Apple any more"
    }
}

/// One App Store Server API endpoint's traffic in a run, against the job's budget on it.
public struct APIEndpointUsage: Sendable, Codable, Equatable {
    /// Requests a second the job allowed itself (its share of Apple's quota, divided among shards).
    public var budgetPerSecond: Double
    public var requests: Int
    /// HTTP 429 answers: Apple's quota for the app ran out (the app server's calls count too).
    public var throttled: Int
    /// Requests over what the budget allowed in the run's time: 1 is the whole budget.
    public var budgetUsed: Double

    public init(budgetPerSecond: Double, requests: Int, throttled: Int, seconds: Double) {
        self.budgetPerSecond = budgetPerSecond
        self.requests = requests
        self.throttled = throttled
        budgetUsed = budgetPerSecond > 0 && seconds > 0 ? Double(requests) / (budgetPerSecond * seconds) : 0
    }
}

/// The counts of one run, as the report and `iap.reconciliation_runs` show them.
public struct RunSummary: Sendable, Codable, Equatable {
    public var runId: Int64 = 0
    public var kind = RunKind.nightly
    public var status = RunStatus.running
    public var isDryRun = false
    public var startedAt = Date(timeIntervalSince1970: 0)
    public var finishedAt: Date?
    public var shard: String?

    /// Accounts by outcome: `verified` (all receipts verified) splits into `corrected` and `unchanged`.
    public var accountsProcessed = 0
    public var accountsVerified = 0
    public var accountsUnchanged = 0
    public var accountsCorrected = 0
    public var accountsDeferred = 0
    public var accountsFailed = 0
    public var accountsInvalidReceipt = 0

    /// Receipts by outcome.
    public var receipts: [ReceiptOutcome: Int] = [:]
    /// Apple statuses seen in final answers, by status.
    public var appleStatuses: [String: Int] = [:]
    public var appleRequests = 0
    /// Times all Apple traffic paused because most recent requests failed transiently.
    public var appleStormPauses = 0

    /// Planned corrections by kind.
    public var corrections: [String: Int] = [:]
    /// Accounts that would lose an entitlement (the safety limit's numerator).
    public var accountsRevoked = 0
    /// Revokes held back by the expiry lag.
    public var heldRevokes = 0
    /// Grants of sandbox purchases: a line of their own in the report.
    public var sandboxGrants = 0
    public var correctionsApplied = 0
    /// Corrections of the run marked superseded: an entitlement changed after planning, or a
    /// correction taken over that this run replaced with its own fresh plan or did not apply
    /// because it did not verify the account again.
    public var correctionsSuperseded = 0
    /// Corrections planned by runs that died, failed or aborted, and taken over by this one. Each
    /// ends superseded (unless this run fails too): only this run's own fresh plan of an account it
    /// verified again is applied.
    public var correctionsTakenOver = 0
    /// What the safety limit counted, once the run had planned (nil for a dry run, or a summary
    /// stored before it).
    public var revokeRatio: RevokeRatioCount?

    /// Fresher blobs from Apple stored in place of the old ones, and placeholders ignored.
    public var latestReceiptsStored = 0
    public var latestReceiptsIgnored = 0

    /// Server notifications processed, by type and outcome.
    public var notifications: [String: [NotificationOutcome: Int]] = [:]
    /// CONSUMPTION_REQUESTs processed: `answer-consumption-requests` answers them (docs/consumption.md).
    public var consumptionRequests: [String] = []
    /// The answers to them (`answer-consumption-requests`): the requests Apple asked in the 24
    /// hours before this run finished, by outcome. Optional so that older summaries still decode.
    public var consumptionAnswers: [String: Int]?
    /// Seconds the oldest request still waiting for its answer had waited when this run finished
    /// (0: none waits): past 10 hours, its 12 are nearly over.
    public var consumptionOldestUnansweredSeconds: Int?
    /// Notifications rejected, each with the check that failed (`jws_invalid: signature`). Optional
    /// only so that summaries stored before V2 still decode.
    public var notificationsRejected: [String]?
    /// Notifications quarantined now, by this run or an earlier one, until released (the first
    /// 1,000): their processing was started and never finished (the process died) three times in a
    /// row. Optional so that older summaries still decode.
    public var notificationsQuarantined: [String]?
    /// Rejected notifications examined again: refused by a configuration check under another
    /// configuration than this run's, or every one (`backfill --retry-rejected`).
    public var notificationsReexamined: Int?
    /// How many are quarantined now: the gauge, every night until they are released.
    public var notificationsQuarantinedCount: Int?
    /// Notifications another process held (the consumption job, another shard) when this run came
    /// to them, and still at its end: not processed, not counted as a start; the next run takes them.
    public var notificationsHeld: Int?
    /// Accounts set aside (each stopped the process three times in a row: quarantined by this
    /// run or an earlier one), failed unread, as `account ID: reason`. Optional so that older
    /// summaries still decode.
    public var accountsQuarantined: [String]?

    /// Accounts with a receipt failing `--escalate-after` runs in a row or more, whichever run
    /// selected them (the first 1,000, as `account A (receipt R): N runs in a row, ...`), and how
    /// many: each on its own line in the report, and the alert's gauge.
    public var accountsEscalated: [String]?
    public var accountsEscalatedCount: Int?

    /// Receipts of another app (`foreign_bundle`: a fraud signal), listed.
    public var bundleMismatches: [String] = []
    /// Products the rules could not judge (neither the catalog nor Apple's signed type says what
    /// they are, or a pass without a duration), left as stored, as `account A, product P: why`.
    /// Optional only so that older summaries still decode.
    public var productsLeftAsStored: [String]?
    /// Receipts the local decode could not read (still verified with Apple).
    public var receiptsNotDecodedLocally = 0
    /// `--source both`: disagreements between verifyReceipt and the Server API, by kind, and the
    /// first few as lines. Optional only so that summaries stored before them still decode.
    public var disagreements: [Disagreement.Kind: Int]?
    public var disagreementExamples: [String]?
    /// `--source both`: accounts the source that is not the authority could not verify (they were
    /// corrected from the authority's answer all the same, and not compared).
    public var accountsNotCrossChecked: Int?

    /// App Store Server API traffic by `endpoint/environment` (`history/Production`). Optional only
    /// so that summaries stored before it still decode; nil when the API was not asked.
    public var apiRequests: [ServerAPIEndpointKey: APIEndpointUsage]?
    /// A rolling run's plan: accounts due and taken by reason, the window, the estimates.
    public var schedule: SchedulePlan?
    /// Get Notification History, per environment, when the run read it.
    public var notificationHistory: [NotificationHistoryRead]?

    public var error: String?

    public init() {}

    public var totalCorrections: Int { corrections.values.reduce(0, +) }

    /// Corrections of the run still planned: its own and those it took over, less those applied
    /// or superseded (an aborted run's plan, kept for review).
    public var correctionsPlanned: Int { totalCorrections + correctionsTakenOver - correctionsApplied - correctionsSuperseded }

    /// Adds one account's result.
    public mutating func add(_ account: AccountOutcomeCounts) {
        accountsProcessed += 1
        switch account.outcome {
        case .verified:
            accountsVerified += 1
            if account.corrections.isEmpty { accountsUnchanged += 1 } else { accountsCorrected += 1 }
        case .deferred: accountsDeferred += 1
        case .failed: accountsFailed += 1
        case .invalidReceipt: accountsInvalidReceipt += 1
        }
        for (outcome, count) in account.receipts { receipts[outcome, default: 0] += count }
        for (status, count) in account.appleStatuses { appleStatuses[status, default: 0] += count }
        appleRequests += account.appleRequests
        for kind in account.corrections { corrections[kind.rawValue, default: 0] += 1 }
        if account.corrections.contains(.revoke) { accountsRevoked += 1 }
        heldRevokes += account.heldRevokes
        sandboxGrants += account.sandboxGrants
        for mismatch in account.bundleMismatches where bundleMismatches.count < 1_000 { bundleMismatches.append(mismatch) }
        for line in account.productsLeftAsStored where (productsLeftAsStored?.count ?? 0) < 1_000 {
            productsLeftAsStored = (productsLeftAsStored ?? []) + [line]
        }
        receiptsNotDecodedLocally += account.receiptsNotDecodedLocally
        latestReceiptsStored += account.latestReceiptsStored
        latestReceiptsIgnored += account.latestReceiptsIgnored
        if let quarantined = account.quarantined, (accountsQuarantined?.count ?? 0) < 1_000 {
            accountsQuarantined = (accountsQuarantined ?? []) + [quarantined]
        }
        if account.otherSourceFailed { accountsNotCrossChecked = (accountsNotCrossChecked ?? 0) + 1 }
        for disagreement in account.disagreements {
            disagreements = disagreements ?? [:]
            disagreements![disagreement.kind, default: 0] += 1
            if (disagreementExamples?.count ?? 0) < 20 {
                disagreementExamples = (disagreementExamples ?? []) + [
                    "account \(disagreement.accountId), \(disagreement.productId)" + (disagreement.transactionId.map { ", transaction \($0)" } ?? "")
                        + ": \(disagreement.kind.rawValue) (verifyReceipt: \(disagreement.verifyReceipt ?? "nothing"), Server API: \(disagreement.serverAPI ?? "nothing"))",
                ]
            }
        }
    }
}

/// What the safety limit judged (docs/guarantees.md, "Safety limit"): verified accounts and those of
/// them that would lose an entitlement, the run's own or, for a shard worker, with its night's other
/// shards; and the accounts the minimum is held against.
public struct RevokeRatioCount: Sendable, Codable, Equatable {
    public var accounts: Int
    public var revokedAccounts: Int
    /// The accounts of the whole night: the run's own unsharded; a shard's `accounts x N`, or its
    /// night's shards' added up when that is more.
    public var nightAccounts: Int
    /// Other shards of the layout counted with this one; nil for an unsharded run.
    public var siblingShards: Int?

    public init(accounts: Int, revokedAccounts: Int) {
        self.accounts = accounts
        self.revokedAccounts = revokedAccounts
        nightAccounts = accounts
    }

    /// The share of the verified accounts that would lose an entitlement; 0 with none verified.
    public var ratio: Double { accounts == 0 ? 0 : Double(revokedAccounts) / Double(accounts) }
}

/// How one account came out of a run.
public enum AccountOutcome: String, Sendable, Codable, CaseIterable {
    case verified, deferred, failed
    case invalidReceipt = "invalid_receipt"

    /// An account is verified only when all its receipts are; otherwise the most hopeful of its
    /// troubles names it: deferred (will be retried) over failed (`foreign_bundle` included)
    /// over invalid.
    public static func combining(_ receiptOutcomes: [ReceiptOutcome]) -> AccountOutcome {
        if receiptOutcomes.allSatisfy({ $0 == .verified }) { return .verified }
        if receiptOutcomes.contains(.deferred) { return .deferred }
        if receiptOutcomes.contains(where: { $0 != .invalidReceipt }) { return .failed }
        return .invalidReceipt
    }
}

/// The per-account numbers a run adds up.
public struct AccountOutcomeCounts: Sendable {
    public var outcome: AccountOutcome
    public var receipts: [ReceiptOutcome: Int] = [:]
    public var appleStatuses: [String: Int] = [:]
    public var appleRequests = 0
    public var corrections: [Correction.Kind] = []
    public var heldRevokes = 0
    public var sandboxGrants = 0
    public var latestReceiptsStored = 0
    public var latestReceiptsIgnored = 0
    public var bundleMismatches: [String] = []
    /// Products the rules could not judge, left as stored (`RunSummary.productsLeftAsStored`).
    public var productsLeftAsStored: [String] = []
    public var receiptsNotDecodedLocally = 0
    /// Where the two sources disagreed about the account (`--source both`).
    public var disagreements: [Disagreement] = []
    /// `--source both`: the source that is not the authority could not verify the account.
    public var otherSourceFailed = false
    /// `account ID: reason` when the account is quarantined: set aside, not verified.
    public var quarantined: String?

    public init(outcome: AccountOutcome) {
        self.outcome = outcome
    }
}
