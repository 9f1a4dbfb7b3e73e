import ArgumentParser
import CivilCalendar
import CommandLineValues
import Foundation
import Logging
import Postgres
import Storage

/// `prune --before DATE`: retention for the tables that only grow (docs/operating.md, "Retention").
struct PruneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Deletes old rows nothing needs any more: processed notifications, dry-run and superseded corrections.",
        discussion: """
            Deletes stored notifications processed before --before, except those quarantined, rejected (a corrected \
            configuration looks at them again), a V2 one the answering job has not examined, and one a refund \
            request's answer names; and the corrections of runs started before --before that never moved an \
            entitlement (a dry run's, and superseded ones). Applied corrections (the outbox, explain), planned ones \
            kept after an abort, the runs themselves and the finance journal (append-only) are never pruned. \
            Swept by id, ten thousand rows a statement: safe beside a running night, and a prune stopped anywhere is \
            run again. --before must be at least \(Self.minimumAgeDays) days ago: Apple sends a notification again \
            for days, and the last month's runs are what report and explain are asked about. --dry-run counts what \
            would go and deletes nothing. See docs/operating.md, "Retention".
            """
    )

    /// The youngest `--before` accepted, in days before now.
    static let minimumAgeDays = 30

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: ArgumentHelp(
        "Prune what is older than this day or time (ISO 8601, UTC), at least 30 days ago.", valueName: "date"))
    var before: String

    @Flag(help: "Count what would be pruned; delete nothing.")
    var dryRun = false

    func validate() throws {
        guard let date = CommandLineTime.parse(before) else { throw ValidationError("--before: not an ISO 8601 date or time: \(before)") }
        let youngest = Date().addingTimeInterval(-Double(Self.minimumAgeDays) * 86_400)
        guard date <= youngest else {
            throw ValidationError("--before \(Timestamp.format(date)) is less than \(Self.minimumAgeDays) days ago: give \(Timestamp.day(youngest)) or earlier")
        }
    }

    func run() async throws {
        // Checked by `validate()`, which ran first.
        guard let date = CommandLineTime.parse(before) else { throw ExitStatus.configuration }
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let pruned = try await Retention.prune(before: date, dryRun: dryRun, connection: connection, logger: logger)
            await connection.close()
            logger.info(dryRun ? "prune.counted" : "prune.done", metadata: [
                "prune.before": "\(Timestamp.format(date))", "prune.notifications": .stringConvertible(pruned.notifications),
                "prune.corrections": .stringConvertible(pruned.corrections),
            ])
            print("\(dryRun ? "Would prune" : "Pruned") \(pruned.notifications) notification(s) and \(pruned.corrections) correction(s) "
                  + "older than \(Timestamp.format(date)).")
        }
    }
}
