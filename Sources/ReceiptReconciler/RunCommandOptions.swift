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

/// Options common to `run` and `backfill` (docs/configuration.md), one group per concern; what
/// belongs to no group (which accounts, how many at a time, which source) stays here.
struct RunCommandOptions: ParsableArguments {
    @OptionGroup var safety: SafetyOptions

    @OptionGroup var traffic: AppleTrafficOptions

    @OptionGroup var reporting: ReportingOptions

    @Option(help: ArgumentHelp("Only accounts whose hash falls in shard K (0-based) of N, e.g. 0/4, for several workers.", valueName: "K/N"))
    var shard: Shard?

    @Option(help: "Accounts per write transaction (and per page read).")
    var batchSize = RunOptions.defaults.batchSize

    @Option(help: "Unmatched server notifications are tried again by later runs until they are this old.")
    var notificationMaxAge = TimeLength(RunOptions.defaults.notificationMaximumAge)

    @Option(help: "Rewrite each account's ledger rows at least once in this long, even when Apple's answer is unchanged, so rows edited or deleted outside the job are put right (each account at its own time, about a seventh of them each night at 7d; backfill always rewrites; 0: every run).")
    var ledgerRefresh = TimeLength(RunOptions.defaults.ledgerRefresh.interval)

    @Option(help: ArgumentHelp(
        "A receipt failing this many runs in a row is reported on its own line, with Apple's last status, and the failing-receipts alert fires; one Apple called malformed (21002) this many runs in a row is set aside for 30 days. Failing never grants or revokes anything.",
        valueName: "runs"))
    var escalateAfter = RunOptions.defaults.persistentFailure.escalateAfter

    @OptionGroup var app: AppIdentityOptions

    @Option(help: ArgumentHelp(
        "Which of Apple's sources verifies accounts: verify-receipt, server-api (the App Store Server API, which needs the App Store Connect key: APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, APPSTORE_PRIVATE_KEY_FILE), or both (each account asked of both; the --authority's answer applied; every disagreement in disagreements.csv). Default: both when a key is configured, else verify-receipt.",
        valueName: "source"))
    var source: SourceOption?

    @Option(help: ArgumentHelp("With --source both, whose answer is applied: verify-receipt or server-api.", valueName: "source"))
    var authority: AuthorityOption = .verifyReceipt

    @OptionGroup var appStoreConnect: AppStoreConnectOptions

    @OptionGroup var proxy: AppleProxyOptions

    @OptionGroup var budget: ServerAPIBudgetOptions

    @Option(help: ArgumentHelp(
        "run and backfill --notifications-only first read Get Notification History (with the App Store Connect key) from where the last read ended; the first read starts at this date (ISO 8601; default 30 days back, at most 180: Apple keeps 180 days of production history, 30 of the sandbox's, and the sandbox is read from as far back as it serves). The window is read a day at a time; a run that stops goes on where it stopped the next night.",
        valueName: "date"))
    var notificationHistorySince: String?

    func validate() throws {
        guard batchSize >= 1 && batchSize <= 50_000 else { throw ValidationError("--batch-size must be between 1 and 50000") }
        guard escalateAfter >= 1 && escalateAfter <= 1_000 else { throw ValidationError("--escalate-after must be between 1 and 1000 runs") }
        if let notificationHistorySince {
            guard let since = CommandLineTime.parse(notificationHistorySince) else {
                throw ValidationError("--notification-history-since: not an ISO 8601 date or time: \(notificationHistorySince)")
            }
            guard since > Date().addingTimeInterval(-180 * 86_400), since < Date() else {
                throw ValidationError("--notification-history-since: Apple keeps notification history for 180 days; give a date within them")
            }
        }
    }

    func runOptions(kind: RunKind, selection: AccountSelection.Kind) throws -> RunOptions {
        var options = RunOptions(kind: kind, selection: AccountSelection(kind: selection, shard: shard))
        safety.apply(to: &options)
        traffic.apply(to: &options)
        reporting.apply(to: &options)
        options.metricsPush = try MetricsPushSetting.resolve(reporting.metricsPush)
        budget.apply(to: &options)
        options.notificationHistorySince = notificationHistorySince.flatMap(CommandLineTime.parse)
        options.batchSize = batchSize
        options.pageSize = batchSize
        options.notificationMaximumAge = notificationMaxAge.duration
        options.ledgerRefresh = LedgerRefresh(interval: ledgerRefresh.duration)
        options.persistentFailure.escalateAfter = escalateAfter
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
