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
            configuration looks at them again) and one a refund request's answer names; and the corrections of runs started before --before that never moved an \
            entitlement (a dry run's, and superseded ones). Applied corrections (the outbox, explain), planned ones \
            kept after an abort, the runs themselves and the finance journal (append-only) are never pruned. \
            Swept by id, ten thousand rows a statement: safe beside a running night, and a prune stopped anywhere is \
            run again. --before must be at least \(Retention.minimumAgeDays) days ago: Apple's notification history \
            reaches back that far, and a notification pruned within it could be stored again by a run catching up. \
            --dry-run counts what would go and deletes nothing. See docs/operating.md, "Retention".
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: ArgumentHelp(
        "Prune what is older than this day or time (ISO 8601, UTC), at least 180 days ago.", valueName: "date"))
    var before: String

    @Flag(help: "Count what would be pruned; delete nothing.")
    var dryRun = false

    func validate() throws {
        guard let date = CommandLineTime.parse(before) else { throw ValidationError("--before: not an ISO 8601 date or time: \(before)") }
        let youngest = Retention.youngest()
        guard date <= youngest else { throw ValidationError("\(Retention.TooRecent(youngest: youngest))") }
    }

    func run() async throws {
        // Checked by `validate()`, which ran first.
        guard let date = CommandLineTime.parse(before) else { throw ExitStatus.configuration }
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let pruned: Retention.Pruned
            do {
                pruned = try await Retention.prune(before: date, dryRun: dryRun, connection: connection, logger: logger)
            } catch let tooRecent as Retention.TooRecent {
                throw ConfigurationError("\(tooRecent)")
            }
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
