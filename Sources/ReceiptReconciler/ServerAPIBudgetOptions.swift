import ArgumentParser
import CommandLineValues
import Foundation
import Jobs
import AppStoreModels

/// How much of Apple's App Store Server API quota the run may spend, and where notification
/// history starts (docs/apple.md, "Apple's budget on the App Store Server API").
struct ServerAPIBudgetOptions: ParsableArguments {
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

    func validate() throws {
        guard apiBudgetShare > 0 && apiBudgetShare <= 1 else { throw ValidationError("--api-budget-share must be above 0 and at most 1") }
        if let notificationHistorySince {
            guard let since = CommandLineTime.parse(notificationHistorySince) else {
                throw ValidationError("--notification-history-since: not an ISO 8601 date or time: \(notificationHistorySince)")
            }
            guard since > Date().addingTimeInterval(-180 * 86_400), since < Date() else {
                throw ValidationError("--notification-history-since: Apple keeps notification history for 180 days; give a date within them")
            }
        }
    }

    func apply(to options: inout RunOptions) {
        options.apiBudgetShare = apiBudgetShare
        options.notificationHistorySince = notificationHistorySince.flatMap(CommandLineTime.parse)
        for override in apiQuota {
            if override.environment == .production {
                options.apiQuota.production[override.endpoint] = override.rate
            } else {
                options.apiQuota.sandbox[override.endpoint] = override.rate
            }
        }
    }
}
