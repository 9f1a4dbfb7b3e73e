import ArgumentParser
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Prints or writes the audit report of a past run.",
        discussion: "md and json are the run's summary.md and summary.json; csv is its corrections.csv."
    )

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case md, json, csv
    }

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The run's id (iap.reconciliation_runs.id).")
    var runId: Int64

    @Option(help: "md, json or csv.")
    var format: Format = .md

    @Option(help: "File to write (default: stdout).")
    var output: String?

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let store = ReconciliationStore(connection: connection)
            guard let summary = try await store.runSummary(runId: runId) else {
                throw ConfigurationError("there is no run \(runId)")
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
