import AppStore
import CommandLineValues
import AppStoreModels
import ArgumentParser
import Foundation
import Jobs
import Reconciliation
import SignedData
import Storage
import Throttling

extension TimeLength: ExpressibleByArgument {}
extension APIQuotaOverride: ExpressibleByArgument {}
extension Shard: ExpressibleByArgument {}

extension SandboxPolicy: ExpressibleByArgument {}

/// Options common to `run` and `backfill` (contract section 2).
struct RunCommandOptions: ParsableArguments {
    @Flag(help: "Plan and report without changing any entitlement, receipt or ledger row.")
    var dryRun = false

    @Option(help: "Apple requests in flight at once.")
    var concurrency = RunOptions.defaults.concurrency

    @Option(help: ArgumentHelp("Apple requests per second at most (default: unlimited).", valueName: "requests-per-second"))
    var rateLimit: Double?

    @Option(help: ArgumentHelp(
        "The share of Apple's App Store Server API quota the job may use on each endpoint (history, statuses, notification-history); the rest stays with the app server's own calls. --shard K/N workers split it N ways.",
        valueName: "share"))
    var apiBudgetShare = RunOptions.defaults.apiBudgetShare

    @Option(help: ArgumentHelp(
        "Apple's quota for this app on one App Store Server API endpoint, in requests a second, where Apple granted more than its table (production 50, sandbox 5 on history, statuses and notification-history): ENDPOINT=R for production, ENDPOINT.sandbox=R for the sandbox. Repeatable.",
        valueName: "endpoint=rate"))
    var apiQuota: [APIQuotaOverride] = []

    @Option(help: ArgumentHelp(
        "run and backfill --notifications-only first read Get Notification History (with the App Store Connect key) from where the last read ended; the first read starts at this date (ISO 8601; default 30 days back, at most 180).",
        valueName: "date"))
    var notificationHistorySince: String?

    @Option(help: "Attempts per receipt before it is deferred to a later run.")
    var maxAttempts = RunOptions.defaults.policy.maximumAttempts

    @Option(help: ArgumentHelp("Where the report goes (default: reports/run-ID).", valueName: "directory"))
    var reportDir: String?

    @Option(help: ArgumentHelp("Only accounts whose hash falls in shard K (0-based) of N, e.g. 0/4, for several workers.", valueName: "K/N"))
    var shard: Shard?

    @Flag(help: "Ask Apple to leave out old renewals (off by default: the finance ledger needs the whole history).")
    var excludeOldTransactions = false

    @Option(help: "Whether sandbox purchases grant entitlements: allow (App Review uses them) or deny.")
    var sandbox = RunOptions.defaults.sandboxPolicy

    @Option(help: "Do not revoke for an expiry that passed less than this long ago (Apple's renewal can show up late).")
    var expiryLag = TimeLength(RunOptions.defaults.expiryLag)

    @Option(help: "Apply nothing (exit 3) when more than this share of the run's accounts would lose an entitlement (over at least 100 accounts).")
    var maxRevokeRatio = RunOptions.defaults.maximumRevokeRatio

    @Option(help: "Accounts per write transaction (and per page read).")
    var batchSize = RunOptions.defaults.batchSize

    @Option(help: ArgumentHelp("Write Prometheus metrics of the run here, for node_exporter's textfile collector.", valueName: "path"))
    var metricsFile: String?

    @Option(help: "How often a progress line is logged when stderr is not a terminal.")
    var progressInterval = TimeLength(RunOptions.defaults.progressInterval)

    @Option(help: "Unmatched server notifications are tried again by later runs until they are this old.")
    var notificationMaxAge = TimeLength(RunOptions.defaults.notificationMaximumAge)

    @Option(help: "Rewrite each account's ledger rows at least once in this long, even when Apple's answer is unchanged, so rows edited or deleted outside the job are put right (each account at its own time, about a seventh of them each night at 7d; backfill always rewrites; 0: every run).")
    var ledgerRefresh = TimeLength(RunOptions.defaults.ledgerRefresh.interval)

    @Option(help: "Time limit for one exchange with Apple.")
    var requestTimeout = TimeLength(RunOptions.defaults.policy.requestTimeout)

    @Option(help: ArgumentHelp("verifyReceipt production address (default: $APPLE_PRODUCTION_URL, else Apple's).", valueName: "url"))
    var appleProductionURL: String?

    @Option(help: ArgumentHelp("verifyReceipt sandbox address (default: $APPLE_SANDBOX_URL, else Apple's).", valueName: "url"))
    var appleSandboxURL: String?

    @OptionGroup var app: AppIdentityOptions

    @Option(help: ArgumentHelp(
        "Which of Apple's sources verifies accounts: verify-receipt, server-api (the App Store Server API, which needs the App Store Connect key: APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, APPSTORE_PRIVATE_KEY_FILE), or both (each account asked of both; the --authority's answer applied; every disagreement in disagreements.csv). Default: both when a key is configured, else verify-receipt.",
        valueName: "source"))
    var source: SourceOption?

    @Option(help: ArgumentHelp("With --source both, whose answer is applied: verify-receipt or server-api.", valueName: "source"))
    var authority: AuthorityOption = .verifyReceipt

    @OptionGroup var appStoreConnect: AppStoreConnectOptions

    @Option(help: ArgumentHelp(
        "File holding the app's shared secret (default: $APPLE_SHARED_SECRET). Never pass the secret itself on the command line.",
        valueName: "path"))
    var sharedSecretFile: String?

    func validate() throws {
        guard concurrency >= 1 && concurrency <= 10_000 else { throw ValidationError("--concurrency must be between 1 and 10000") }
        guard maxAttempts >= 1 && maxAttempts <= 100 else { throw ValidationError("--max-attempts must be between 1 and 100") }
        guard (0...1).contains(maxRevokeRatio) else { throw ValidationError("--max-revoke-ratio must be between 0 and 1") }
        if let rateLimit, !RequestRate.range.contains(rateLimit) {
            throw ValidationError("--rate-limit must be between \(RequestRate.range.lowerBound) and \(Int(RequestRate.range.upperBound)) requests a second")
        }
        guard apiBudgetShare > 0 && apiBudgetShare <= 1 else { throw ValidationError("--api-budget-share must be above 0 and at most 1") }
        if let notificationHistorySince {
            guard let since = CommandLineTime.parse(notificationHistorySince) else {
                throw ValidationError("--notification-history-since: not an ISO 8601 date or time: \(notificationHistorySince)")
            }
            guard since > Date().addingTimeInterval(-180 * 86_400), since < Date() else {
                throw ValidationError("--notification-history-since: Apple keeps notification history for 180 days; give a date within them")
            }
        }
        guard batchSize >= 1 && batchSize <= 50_000 else { throw ValidationError("--batch-size must be between 1 and 50000") }
        // libcurl reads a zero timeout as "no limit": a request could then wait forever.
        guard requestTimeout.seconds >= 0.001 else { throw ValidationError("--request-timeout must be at least 1ms (0 would mean no limit)") }
        guard progressInterval.seconds >= 0.1 else { throw ValidationError("--progress-interval must be at least 100ms") }
    }

    /// Apple's addresses; each one must be `https://`, or `http://` on loopback (the simulator),
    /// so that a typo cannot send the shared secret in clear.
    func endpoints() throws -> VerifyReceiptClient.Endpoints {
        let environment = ProcessInfo.processInfo.environment
        let endpoints = VerifyReceiptClient.Endpoints(
            production: appleProductionURL ?? environment["APPLE_PRODUCTION_URL"].flatMap { $0.isEmpty ? nil : $0 }
                ?? VerifyReceiptClient.Endpoints.apple.production,
            sandbox: appleSandboxURL ?? environment["APPLE_SANDBOX_URL"].flatMap { $0.isEmpty ? nil : $0 }
                ?? VerifyReceiptClient.Endpoints.apple.sandbox)
        try AppleURL.require(endpoints.production, name: "the production URL (--apple-production-url, APPLE_PRODUCTION_URL)")
        try AppleURL.require(endpoints.sandbox, name: "the sandbox URL (--apple-sandbox-url, APPLE_SANDBOX_URL)")
        return endpoints
    }

    func sharedSecret() throws -> String {
        if let sharedSecretFile {
            let text = try SecretFile.read(sharedSecretFile, what: "the shared secret file")
            let secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !secret.isEmpty else { throw ConfigurationError("the shared secret file \(sharedSecretFile) is empty") }
            return secret
        }
        guard let secret = ProcessInfo.processInfo.environment["APPLE_SHARED_SECRET"], !secret.isEmpty else {
            throw ConfigurationError("no shared secret: set APPLE_SHARED_SECRET or pass --shared-secret-file")
        }
        return secret
    }

    func runOptions(kind: RunKind, selection: AccountSelection.Kind) throws -> RunOptions {
        var options = RunOptions(kind: kind, selection: AccountSelection(kind: selection, shard: shard))
        options.isDryRun = dryRun
        options.concurrency = concurrency
        options.requestsPerSecond = rateLimit
        options.apiBudgetShare = apiBudgetShare
        options.notificationHistorySince = notificationHistorySince.flatMap(CommandLineTime.parse)
        for override in apiQuota {
            if override.environment == .production {
                options.apiQuota.production[override.endpoint] = override.rate
            } else {
                options.apiQuota.sandbox[override.endpoint] = override.rate
            }
        }
        options.policy = VerificationPolicy(
            maximumAttempts: maxAttempts, requestTimeout: requestTimeout.duration, excludeOldTransactions: excludeOldTransactions)
        options.sandboxPolicy = sandbox
        options.expiryLag = expiryLag.duration
        options.maximumRevokeRatio = maxRevokeRatio
        options.reportDirectory = reportDir.map { URL(filePath: $0) }
        options.metricsFile = metricsFile.map { URL(filePath: $0) }
        options.batchSize = batchSize
        options.pageSize = batchSize
        options.progressInterval = progressInterval.duration
        options.notificationMaximumAge = notificationMaxAge.duration
        options.ledgerRefresh = LedgerRefresh(interval: ledgerRefresh.duration)
        options.bundleIds = Set(app.configuredBundleIds())
        options.appleRootCertificates = try app.trustedRoots()
        options.appAppleId = try app.configuredAppAppleId()
        let source = self.source ?? (appStoreConnect.isConfigured ? .both : .verifyReceipt)
        switch source {
        case .verifyReceipt: options.sources = .verifyReceipt
        case .serverAPI: options.sources = .serverAPI
        case .both: options.sources = .both(authority: authority.appleSource)
        }
        return options
    }
}
