import Foundation
import Logging
import Reconciliation
import Storage

/// A first night with receipts stored and an empty `iap.entitlements`, without `--first-night`:
/// refused before anything is read or written (docs/adoption.md, "The first night").
public struct FirstNightRefused: Error, CustomStringConvertible {
    public var description: String {
        "iap.entitlements is empty and receipts are stored: this first night would decide every customer's access "
            + "from Apple's answers alone. Import the app's current access first (docs/adoption.md, 'The first import'), "
            + "or pass --first-night to run anyway; it prints what it takes away, per product, before applying anything"
    }
}

/// What a first night takes away, per product, printed before anything is applied.
public struct FirstNightLosses: Sendable, Equatable {
    public var products: [Product]
    /// The accounts Apple answered in full this run: what the losses are out of.
    public var accountsVerified: Int
    public var isDryRun: Bool

    public struct Product: Sendable, Equatable {
        public var productId: String
        /// Accounts whose plan takes this product's access away.
        public var accounts: Int
    }

    /// The lines printed on stdout: a heading, a row per product, and what is done next.
    public var lines: [String] {
        let width = max(10, products.map(\.productId.count).max() ?? 0)
        let pad = { (text: String) in text + String(repeating: " ", count: max(0, width - text.count)) }
        var lines = ["First night: access this run takes away, per product (out of \(accountsVerified) verified accounts)"]
        lines.append("  \(pad("product"))  accounts")
        lines += products.map { "  \(pad($0.productId))  \($0.accounts)" }
        if products.isEmpty { lines.append("  (none: no account loses access)") }
        lines.append(isDryRun
            ? "A dry run: nothing is applied."
            : "Applied next, within --max-revoke-ratio; the plan is in corrections.csv and `receipt-reconciler corrections`.")
        return lines
    }
}

extension ReconciliationRun {
    /// Where the adoption stands for this run: refuses a first night on an empty
    /// `iap.entitlements` with receipts stored unless `--first-night` says so (a dry run is never
    /// refused: it applies nothing), and records the first night's beginning when this is the
    /// first run that is not a dry run.
    func judgeFirstNight(reader: ReconciliationStore) async throws -> Adoption {
        let adoption = try await withDatabaseRetry(logger: logger) { try await reader.adoption() }
        guard adoption.isFirstNight, !options.isDryRun else { return adoption }
        if !options.acceptsFirstNight, try await withDatabaseRetry(logger: logger, { try await reader.hasReceiptsButNoEntitlements() }) {
            throw FirstNightRefused()
        }
        guard adoption.firstNightStartedAt == nil else { return adoption }
        return try await withDatabaseRetry(logger: logger) { try await reader.beginFirstNight() }
    }

    /// Says, per product, what a first night's plan takes away, before the safety limit and
    /// before anything is applied: on stdout (through `firstNightLosses`) and in the log.
    func announceFirstNightLosses(_ context: RunContext, summary: RunSummary) async throws {
        guard context.adoption.isFirstNight else { return }
        let runId = context.runId
        let losses = try await withDatabaseRetry(logger: context.logger) { try await context.writer.plannedLosses(runId: runId) }
        let announced = FirstNightLosses(
            products: losses.map { FirstNightLosses.Product(productId: $0.productId, accounts: $0.accounts) },
            accountsVerified: summary.accountsVerified, isDryRun: options.isDryRun)
        var metadata: Logger.Metadata = ["run.accounts_verified": .stringConvertible(summary.accountsVerified)]
        for loss in losses { metadata["loss.\(loss.productId)"] = .stringConvertible(loss.accounts) }
        context.logger.notice("run.first_night_losses", metadata: metadata)
        firstNightLosses?(announced)
    }
}
