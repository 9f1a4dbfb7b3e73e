import ArgumentParser
import CommandLineValues
import Jobs
import Reconciliation

/// What may be changed, and what stops the run from changing too much (docs/guarantees.md).
struct SafetyOptions: ParsableArguments {
    @Flag(help: "Plan and report without changing any entitlement, receipt or ledger row.")
    var dryRun = false

    @Option(help: "Whether sandbox purchases grant entitlements: allow (App Review uses them) or deny.")
    var sandbox = RunOptions.defaults.sandboxPolicy

    @Option(help: "Do not revoke for an expiry that passed less than this long ago (Apple's renewal can show up late).")
    var expiryLag = TimeLength(RunOptions.defaults.expiryLag)

    @Option(help: "Apply nothing (exit 3) when more than this share of the accounts the run verified would lose an entitlement (shards of one night count together; see --revoke-ratio-minimum).")
    var maxRevokeRatio = RunOptions.defaults.maximumRevokeRatio

    @Option(help: "Judge --max-revoke-ratio only over a night of at least this many verified accounts (a shard K/N counts as its whole night).")
    var revokeRatioMinimum = RunOptions.defaults.revokeRatioMinimumAccounts

    @Flag(help: "Run although iap.entitlements is empty while receipts are stored (the app's own access was never imported): every account whose first row grants nothing counts as losing access. The run prints what it takes away, per product, before applying anything (docs/adoption.md, 'The first night').")
    var firstNight = false

    func validate() throws {
        guard (0...1).contains(maxRevokeRatio) else { throw ValidationError("--max-revoke-ratio must be between 0 and 1") }
        guard revokeRatioMinimum >= 1 else { throw ValidationError("--revoke-ratio-minimum must be at least 1") }
    }

    func apply(to options: inout RunOptions) {
        options.isDryRun = dryRun
        options.sandboxPolicy = sandbox
        options.expiryLag = expiryLag.duration
        options.maximumRevokeRatio = maxRevokeRatio
        options.revokeRatioMinimumAccounts = revokeRatioMinimum
        options.acceptsFirstNight = firstNight
    }
}
