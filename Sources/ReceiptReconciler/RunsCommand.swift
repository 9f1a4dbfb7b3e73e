import ArgumentParser
import CivilCalendar
import Foundation
import Logging
import Reconciliation
import Postgres
import Storage

/// `runs`: the recent runs with their status, newest first; `report ID` reads any one of them.
struct RunsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "runs",
        abstract: "Lists the recent runs with their status, newest first.",
        discussion: """
            One line a run (tab-separated, with a header): its id, kind, status, whether it was a dry run, its \\
            shard, when it started and finished, the accounts it processed, its corrections and its error. \\
            `receipt-reconciler report ID` prints any run's report; --json writes one JSON object a line.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "List at most this many runs.")
    var limit = 20

    @Flag(help: "One JSON object a line.")
    var json = false

    func validate() throws {
        guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be between 1 and 10000") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let runs = try await ReconciliationStore(connection: connection).recentRuns(limit: limit)
            await connection.close()
            let sink = try CSVSink(path: nil)
            if !json {
                try sink.write(["ID", "KIND", "STATUS", "DRY_RUN", "SHARD", "STARTED_AT", "FINISHED_AT", "ACCOUNTS", "CORRECTIONS", "ERROR"]
                    .joined(separator: "\t") + "\n")
            }
            for run in runs {
                try sink.write(json ? try ProgramJSON.line(RunLine(run)) + "\n" : Self.textLine(run))
            }
            try sink.commit()
            logger.info("runs.listed", metadata: ["runs.count": .stringConvertible(runs.count)])
        }
    }

    /// Tab-separated; every value from the database is escaped (an error's tab or newline included).
    static func textLine(_ run: RunListing) -> String {
        TabSeparated.line([String(run.id), run.kind, run.status, run.isDryRun ? "yes" : "no", run.shard ?? "-", Timestamp.format(run.startedAt),
                           run.finishedAt.map { Timestamp.format($0) } ?? "-", String(run.accountsProcessed), String(run.corrections), run.error ?? ""])
    }
}

/// One line of `runs --json`: every key always present.
struct RunLine: Encodable {
    let id: Int64
    let kind: String
    let status: String
    let dryRun: Bool
    @Nullable var shard: String?
    let startedAt: Date
    @Nullable var finishedAt: Date?
    let accountsProcessed: Int
    let corrections: Int
    @Nullable var error: String?

    init(_ run: RunListing) {
        (id, kind, status, dryRun, shard, startedAt) = (run.id, run.kind, run.status, run.isDryRun, run.shard, run.startedAt)
        (finishedAt, accountsProcessed, corrections, error) = (run.finishedAt, run.accountsProcessed, run.corrections, run.error)
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, status, dryRun = "dry_run", shard, startedAt = "started_at", finishedAt = "finished_at"
        case accountsProcessed = "accounts_processed", corrections, error
    }
}
