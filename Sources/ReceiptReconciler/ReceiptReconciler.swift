import ArgumentParser
import Foundation

/// receipt-reconciler: keeps in-app-purchase entitlements true to what Apple says.
struct ReceiptReconciler: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt-reconciler",
        abstract: "Re-verifies stored App Store receipts with Apple and corrects the entitlements in PostgreSQL.",
        discussion: """
            Configuration comes from flags, else the environment: DATABASE_URL (libpq connection string or \
            postgresql:// URI), APPLE_SHARED_SECRET, APPLE_PRODUCTION_URL, APPLE_SANDBOX_URL.

            Exit status: 0 completed (single receipts may have failed: see the report); 1 the run failed; \
            2 bad usage or configuration (including a shared secret Apple rejects); 3 aborted by a safety \
            limit before applying; 4 another run holds the lock.
            """,
        subcommands: [
            MigrateCommand.self, RunCommand.self, BackfillCommand.self, ExportFinanceCommand.self, ReportCommand.self,
            IngestNotificationsCommand.self, AnswerConsumptionRequestsCommand.self, ExplainCommand.self, CorrectionsCommand.self, RunsCommand.self, PruneCommand.self, InspectCommand.self, SimulateAppleCommand.self,
            SeedDemoCommand.self,
        ]
    )

    /// ArgumentParser's own `main`, but bad usage exits 2, as docs/operating.md says (not 64).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            guard exitCode(for: error) == .validationFailure else { exit(withError: error) }
            FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
            Foundation.exit(ExitStatus.configuration.rawValue)
        }
    }
}
