import AppStore
import Foundation
import Reconciliation
import SignedData
import Storage
import Throttling

/// Everything a `run` or `backfill` was asked to do.
public struct RunOptions: Sendable {
    public var kind: RunKind
    public var selection: AccountSelection
    public var isDryRun = false
    /// Apple requests in flight at once.
    public var concurrency = 64
    public var requestsPerSecond: Double?
    /// Apple's quota for the app on the App Store Server API, and the share of it the job takes
    /// (divided among the shards running at once).
    public var apiQuota = ServerAPIQuota.apple
    public var apiBudgetShare = 0.5

    /// `run` through the App Store Server API: the accounts are taken by a plan that fits Apple's
    /// budget (notified, at risk, then the full cycle), not all that are due at once.
    public var rollingSchedule: RollingSchedule?

    /// The job's budget on the Server API: its share of the quota, split among the shards.
    public func apiBudget() -> ServerAPIBudget {
        ServerAPIBudget(quota: apiQuota, share: apiBudgetShare, shards: selection.shard?.count ?? 1)
    }
    public var policy = VerificationPolicy()
    public var sandboxPolicy = SandboxPolicy.allow
    public var expiryLag: Duration = .seconds(3600)
    /// Nothing is applied when more than this share of the accounts the run verified would lose an
    /// entitlement (a shard's with its night's other shards)...
    public var maximumRevokeRatio = 0.10
    /// ...over a night of at least this many verified accounts (docs/guarantees.md, "Safety limit").
    public var revokeRatioMinimumAccounts = 100
    /// A first night on an empty `iap.entitlements` (nothing of the app's own access imported) is
    /// refused unless this is set (`--first-night`, docs/adoption.md, "The first night").
    public var acceptsFirstNight = false
    /// Accounts read per page, and per write transaction.
    public var pageSize = 500
    public var batchSize = 500
    /// The app's bundle ids (`--bundle-id`, `APPLE_BUNDLE_ID`): a receipt of any other bundle is
    /// `foreign_bundle`. Empty: each receipt row's own `bundle_id` is the app's, else nothing is checked.
    public var bundleIds: Set<String> = []
    /// How long a deferred receipt waits before the next try: 15 minutes after its first failed
    /// run, doubling, at most 12 hours.
    public var deferral = Backoff(base: .seconds(900), maximum: .seconds(12 * 3600))
    /// Each account's ledger rows are rewritten at least once in this long, even when Apple's
    /// answer is unchanged (`--ledger-refresh`): rows edited outside the job heal.
    public var ledgerRefresh = LedgerRefresh(interval: .seconds(7 * 86_400))
    /// Failed (final) receipts are tried again after this long.
    public var failedRetryAfter: Duration = .seconds(20 * 3600)
    /// When a receipt that keeps failing is reported on its own line, and one Apple keeps calling
    /// malformed is set aside (`--escalate-after`; `PersistentFailure`).
    public var persistentFailure = PersistentFailure.Policy()
    public var reportDirectory: URL?
    /// Trusted roots for Apple's signed data (DER): Apple Root CA - G3 unless
    /// `--apple-root-certificate` replaces it.
    public var appleRootCertificates: [[UInt8]] = [AppleRootCertificates.appleRootCAG3]
    /// Which of Apple's sources verifies accounts (`--source`, `--authority`).
    public var sources = SourcePlan.verifyReceipt
    /// The app's Apple id (`APPSTORE_APP_APPLE_ID`): production V2 notifications must carry it.
    public var appAppleId: Int64?
    /// Unmatched notifications are retried until this old.
    public var notificationMaximumAge: Duration = .seconds(7 * 86_400)
    /// Process server notifications before picking accounts (not in a dry run).
    public var processesNotifications = true
    /// Release the quarantined notifications before processing them (`backfill --retry-quarantined`).
    public var retriesQuarantined = false
    /// Examine every rejected notification again (`backfill --retry-rejected`), not only those a
    /// configuration check refused under another configuration.
    public var retriesRejected = false
    /// Read Get Notification History first (`run`, `backfill --notifications-only`), when the
    /// Server API is configured; from `notificationHistorySince` the first time.
    public var readsNotificationHistory = false
    public var notificationHistorySince: Date?
    /// Prometheus text file written at the end of the run.
    public var metricsFile: URL?
    /// A Prometheus Pushgateway the run's metrics are pushed to at its end (`--metrics-push`).
    public var metricsPush: MetricsPush?
    /// A progress line on the terminal (when stderr is one), else a log line every `progressInterval`.
    public var progressInterval: Duration = .seconds(10)

    public init(kind: RunKind, selection: AccountSelection) {
        self.kind = kind
        self.selection = selection
    }

    /// A nightly run's staleness: an account verified more recently is not due (`--stale-after`).
    public static let defaultStaleAfter: Duration = .seconds(20 * 3600)

    /// Every default, written once: the command line's options start from these.
    public static var defaults: RunOptions {
        RunOptions(kind: .nightly, selection: AccountSelection(kind: .due(staleAfter: defaultStaleAfter)))
    }

    public var shardText: String? {
        selection.shard?.description
    }
}

/// Raised by the shared-secret guard: many 21004 answers in a row mean the secret is wrong.
public struct SharedSecretRejected: Error, CustomStringConvertible {
    public var count: Int
    public var description: String {
        "Apple rejected the shared secret \(count) times in a row (status 21004): check APPLE_SHARED_SECRET"
    }
}

/// Another run holds the lock.
public struct RunLocked: Error, CustomStringConvertible {
    public var description: String { "another run holds the lock on this database" }
}

/// The run lost its lock (its connection was lost) and another run took it meanwhile: the run
/// stops before writing anything more; its committed plan is taken over by a later run.
public struct RunLockLost: Error, CustomStringConvertible {
    public var description: String {
        "the connection holding the run lock was lost and another run holds the lock now: stopped before writing more"
    }
}

extension RunOptions {
    /// What Apple's signed data must match in this run (docs/apple.md, "The App Store Server API as the source").
    public var signedDataConfiguration: SignedDataVerifier.Configuration {
        SignedDataVerifier.Configuration(trustedRoots: appleRootCertificates, bundleIds: bundleIds, appAppleId: appAppleId)
    }
}

/// Which of Apple's sources verifies a run's accounts, and whose answer is applied: the one
/// shape of `--source` and `--authority` inside the program.
public enum SourcePlan: Sendable, Equatable {
    case verifyReceipt
    case serverAPI
    /// Both are asked about every account; the authority's answer is applied and every
    /// disagreement between the two reported (`disagreements.csv`).
    case both(authority: AppleSource)

    /// The source whose answer is applied.
    public var authority: AppleSource {
        switch self {
        case .verifyReceipt: .verifyReceipt
        case .serverAPI: .serverAPI
        case .both(let authority): authority
        }
    }

    /// Whether the App Store Server API is asked (and its key needed).
    public var asksServerAPI: Bool { self != .verifyReceipt }

    /// Whether the two sources are compared.
    public var crossChecks: Bool {
        if case .both = self { return true }
        return false
    }
}

/// A rolling run's bounds: every account at least once per `fullCycle`; at most what `window`
/// holds at the API budget tonight (nil: every due account).
public struct RollingSchedule: Sendable {
    public var fullCycle: Duration
    public var window: Duration?

    public init(fullCycle: Duration = .seconds(7 * 86_400), window: Duration? = nil) {
        self.fullCycle = fullCycle
        self.window = window
    }
}
