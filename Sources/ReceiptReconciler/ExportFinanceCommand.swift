import ArgumentParser
import CommandLineValues
import Foundation
import Postgres
import Reconciliation
import ReportOutput
import Storage

struct ExportFinanceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export-finance",
        abstract: "Writes the finance audit CSV of purchases, renewals and refunds in a period.",
        discussion: """
            RFC 4180, UTF-8, a header row, one row per event with its time in [--from, --to) (UTC), ordered by \
            event time then transaction id. Events: purchase (transaction_id = original_transaction_id), renewal \
            (the other transactions of subscriptions), refund (cancellation in the period with reason 0 or 1, \
            not an upgrade: an upgrade is not a refund). Price and currency come from iap.products. Sandbox \
            transactions are left out unless --include-sandbox. Written to a temporary file and renamed, so \
            --output never holds half an export.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "First day or time of the period, included (e.g. 2026-11-01 or 2026-11-01T00:00:00Z).")
    var from: String

    @Option(help: "End of the period, excluded.")
    var to: String

    @Option(help: "File to write (default: stdout).")
    var output: String?

    @Flag(help: "Include sandbox transactions.")
    var includeSandbox = false

    @Flag(help: ArgumentHelp(
        "Write every cell as it is, for machine readers.",
        discussion: "By default a cell that would start with =, +, -, @, a tab or a carriage return and is not a number gets a leading ' so that a spreadsheet shows it as text, never runs it as a formula."))
    var rawCells = false

    func validate() throws {
        guard let start = CommandLineTime.parse(from) else { throw ValidationError("--from: not an ISO 8601 date or time: \(from)") }
        guard let end = CommandLineTime.parse(to) else { throw ValidationError("--to: not an ISO 8601 date or time: \(to)") }
        guard start < end else { throw ValidationError("--from must be before --to") }
    }

    func run() async throws {
        // Checked by `validate()`, which ran first.
        guard let start = CommandLineTime.parse(from), let end = CommandLineTime.parse(to) else { throw ExitStatus.configuration }
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let sink = try CSVSink(path: output)
            do {
                try sink.write(CSV.row(FinanceReport.columns))
                let rows = try await FinanceLedger.forEachEvent(
                    connection: connection, from: start, to: end, includeSandbox: includeSandbox
                ) { event in
                    try sink.write(CSV.row(FinanceReport.fields(event), formulaSafe: !rawCells))
                }
                try sink.commit()
                logger.info("finance.exported", metadata: ["finance.rows": "\(rows)", "finance.output": "\(output ?? "stdout")"])
            } catch {
                sink.discard()
                throw error
            }
            await connection.close()
        }
    }
}

/// Stdout (64 KB at a time), or a `ReportFile`: written aside and renamed into place when complete.
final class CSVSink {
    private let file: ReportFile?
    private var buffer = ""

    init(path: String?) throws {
        file = try path.map { try ReportFile(URL(filePath: $0)) }
    }

    func write(_ text: String) throws {
        if let file { return try file.write(text) }
        buffer += text
        if buffer.utf8.count >= 1 << 16 { try flushStandardOutput() }
    }

    func commit() throws {
        if let file { return try file.commit() }
        try flushStandardOutput()
    }

    func discard() {
        file?.discard()
    }

    private func flushStandardOutput() throws {
        do {
            try FileHandle.standardOutput.write(contentsOf: Data(buffer.utf8))
            buffer = ""
        } catch {
            throw ReportError(description: "cannot write stdout: \(ReportFile.reason(error))")
        }
    }
}

/// The export's one task writes it; never shared.
@available(*, unavailable)
extension CSVSink: Sendable {}
