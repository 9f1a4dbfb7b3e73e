import ArgumentParser
import Postgres
import SchemaMigrations
import Storage

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Creates or updates the iap schema: applies the bundled Migrations/*.sql once each, in order.",
        discussion: """
            Each migration runs in its own transaction and is recorded in iap.schema_migrations. \
            Safe to run again, and from several processes at once (they wait on an advisory lock). \
            A migration changed after it was applied is refused. Heavy data changes come after the files, in \
            short transactions (the finance journal's first recording over an older ledger, a thousand rows each); a migrate \
            stopped halfway resumes them. See docs/database.md, "Migrations on a big database".
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let applied: [String]
            do {
                applied = try await Migrator(logger: logger).migrate(connection)
            } catch let failure as Migrator.Failure {
                // Exit 2: a newer schema (an image rolled back) or an edited migration; retrying mends neither.
                throw ConfigurationError("\(failure). Migrations only go forward: run this database with a build at least as new as its schema")
            }
            // The journal's first recording over a ledger older than it (Migrations/0037), in
            // transactions of a thousand ledger rows: stopped, the next migrate resumes it.
            let first = try await JournalFirstRecording.resume(connection: connection, logger: logger)
            if first.rows > 0 {
                print("Recorded \(first.events) finance journal event(s) over \(first.rows) ledger row(s): the journal's first recording.")
            }
            // Ledger rows a v1 REFUND told first, given the time of their cancellation (Migrations/0037).
            let repaired = try await LedgerCancellationTimes.resume(connection: connection, logger: logger)
            if repaired > 0 { print("Gave \(repaired) ledger row(s) their cancellation's time as the time of Apple's word.") }
            // Adjustments a migration found owed (Migrations/0024: signed terms learned after the
            // catalog's were journaled) are recorded now, by the journal's own rules.
            let events = try await ReconciliationStore(connection: connection).drainJournalBacklog()
            if events > 0 { print("Recorded \(events) finance journal event(s) the migrations found owed.") }
            await connection.close()
            if applied.isEmpty {
                print("Schema up to date (\(Migration.bundled.count) migrations).")
            } else {
                print("Applied \(applied.count) migration(s): \(applied.joined(separator: ", ")).")
            }
        }
    }
}
