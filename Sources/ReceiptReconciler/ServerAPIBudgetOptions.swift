import ArgumentParser
import CommandLineValues
import Foundation
import Jobs
import AppStore
import AppStoreModels

/// How much of Apple's App Store Server API quota the job may spend (docs/apple.md, "Apple's
/// budget on the App Store Server API").
struct ServerAPIBudgetOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "The share of Apple's App Store Server API quota the job may use on each endpoint (history, statuses, notification-history, consumption); the rest stays with the app server's own calls. --shard K/N workers split it N ways.",
        valueName: "share"))
    var apiBudgetShare = RunOptions.defaults.apiBudgetShare

    @Option(help: ArgumentHelp(
        "Apple's quota for this app on one App Store Server API endpoint, in requests a second, where Apple granted more than its table (production 50, sandbox 5 on history, statuses, notification-history and consumption): ENDPOINT=R for production, ENDPOINT.sandbox=R for the sandbox. Repeatable.",
        valueName: "endpoint=rate"))
    var apiQuota: [APIQuotaOverride] = []

    func validate() throws {
        guard apiBudgetShare > 0 && apiBudgetShare <= 1 else { throw ValidationError("--api-budget-share must be above 0 and at most 1") }
    }

    /// The budget of a command that is one worker (no shards): built by `RunOptions.apiBudget`, the one
    /// place a budget is made from the options.
    func budget() -> ServerAPIBudget {
        var options = RunOptions.defaults
        apply(to: &options)
        return options.apiBudget()
    }

    func apply(to options: inout RunOptions) {
        options.apiBudgetShare = apiBudgetShare
        options.apiQuota = quota(startingFrom: options.apiQuota)
    }

    /// Apple's table, with the `--api-quota` overrides.
    func quota(startingFrom quota: ServerAPIQuota = .apple) -> ServerAPIQuota {
        var quota = quota
        for override in apiQuota {
            if override.environment == .production {
                quota.production[override.endpoint] = override.rate
            } else {
                quota.sandbox[override.endpoint] = override.rate
            }
        }
        return quota
    }
}
