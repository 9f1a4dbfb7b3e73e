import ArgumentParser
import Foundation
import Jobs
import Logging
import Postgres
import Reconciliation
import Storage

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Prints or writes the audit report of a past run, from the database.",
        discussion: """
            md and json are the run's summary.md and summary.json; csv is its corrections.csv. Every run's report \
            is kept in the database (iap.reconciliation_runs and iap.corrections), so it can be read wherever the \
            run's own files went (a pod's emptyDir vanishes with it). `runs` lists the recent runs and their ids; \
            `report latest` is the latest run that ended, a dry run too (each shard of a night is a run of its own).
            """
    )

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case md, json, csv
    }

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: ArgumentHelp("The run's id (iap.reconciliation_runs.id, as `runs` lists it), or latest.", valueName: "run-id|latest"))
    var run: RunReference

    @Option(help: "md, json or csv.")
    var format: Format = .md

    @Option(help: "File to write (default: stdout).")
    var output: String?

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let store = ReconciliationStore(connection: connection)
            let runId: Int64
            switch run {
            case .id(let id): runId = id
            case .latest:
                guard let latest = try await store.latestEndedRunId() else {
                    throw ConfigurationError("no run has ended yet: there is no latest report (`receipt-reconciler runs` lists the runs)")
                }
                runId = latest
            }
            guard let summary = try await store.runSummary(runId: runId) else {
                throw ConfigurationError("there is no run \(runId) (`receipt-reconciler runs` lists the runs)")
            }
            if run == .latest, let shard = summary.shard {
                // One shard is a part of its night: the others may have ended otherwise.
                logger.notice("report.latest_is_a_shard", metadata: [
                    "run.id": .stringConvertible(runId), "run.shard": "\(shard)",
                    "hint": "the latest run is one shard of its night: `receipt-reconciler runs` lists the others and how each ended",
                ])
            }
            let sink = try CSVSink(path: output)
            do {
                switch format {
                case .md: try sink.write(RunReport.markdown(summary))
                case .json: try sink.write(RunReport.json(summary))
                case .csv:
                    try sink.write(CSV.row(RunReportWriter.correctionsHeader))
                    try await store.forEachCorrection(runId: runId) { try sink.write(CSV.row(RunReport.correctionFields($0))) }
                }
                try sink.commit()
            } catch {
                sink.discard()
                throw error
            }
            await connection.close()
        }
    }
}

/// A run named on the command line: its id, or `latest`.
enum RunReference: ExpressibleByArgument, Equatable {
    case id(Int64)
    case latest

    init?(argument: String) {
        if argument == "latest" {
            self = .latest
        } else if let id = Int64(argument), id > 0 {
            self = .id(id)
        } else {
            return nil
        }
    }
}
