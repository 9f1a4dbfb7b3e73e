import ArgumentParser
import CivilCalendar
import CommandLineValues
import Foundation
import Logging
import Postgres
import Reconciliation
import ReportOutput
import Storage

extension FinanceLedger.PeriodBasis: ExpressibleByArgument {}

struct ExportFinanceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export-finance",
        abstract: "Writes the finance audit CSV: the journal of money as it moved in a period.",
        discussion: """
            RFC 4180, UTF-8, a header row, one row per event of the finance journal whose time is in [--from, --to) \
            (UTC): with --by event (the default) the event's own time, ordered by event time, then transaction id, \
            event, occurrence; with --by recorded the time the journal recorded it, ordered by recorded time, then \
            event time, transaction id, event, occurrence. A month's close runs both: the month by event as of its \
            end, and the month --by recorded for what it recorded for earlier periods (late refunds, adjustments). \
            Events: purchase, renewal, refund (money back: full, or prorated by Apple's revocationPercentage), \
            refund_reversal (Apple reversed a refund; dated when it did). amount is what moved, in milliunits \
            written as a decimal, negative when it went back to the customer: customer prices (tax included), not \
            Apple's proceeds. price is the list price (Apple's signed price, else iap.products). The journal is \
            append-only: a closed period keeps its rows, and a reversal appears in the period of its own time. \
            --as-of lists only what was recorded by then, so an earlier export is made again byte for byte; without \
            it, the export is as of when it started, which it logs; a later --as-of than that is refused (exit 2). \
            Sandbox transactions are left out unless --include-sandbox. Written to a temporary file and renamed, so \
            --output never holds half an export. See docs/reports.md.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "First day or time of the period, included (e.g. 2026-11-01 or 2026-11-01T00:00:00Z).")
    var from: String

    @Option(help: "End of the period, excluded.")
    var to: String

    @Option(help: ArgumentHelp(
        "Which time --from and --to bound: event (the event's own time) or recorded (when the journal recorded it).",
        discussion: "recorded lists what a close made now must book, whatever period the events belong to, ordered by recorded time, then event time, transaction id, event, occurrence."))
    var by: FinanceLedger.PeriodBasis = .event

    @Option(help: ArgumentHelp(
        "Only events recorded at or before this time (ISO 8601): reproduces an export made then.",
        discussion: "Default: the time the export starts, logged as finance.as_of. A time after that is refused (exit 2): an export of the future cannot be made again."))
    var asOf: String?

    @Option(help: "File to write (default: stdout).")
    var output: String?

    @Flag(help: "Include sandbox transactions.")
    var includeSandbox = false

    @Flag(help: ArgumentHelp(
        "Print per currency and event the count and the amount, and the net.",
        discussion: "On stdout; the CSV is then written only with --output. Customer prices (tax included), not Apple's proceeds: not a tie-out with Apple's financial reports."))
    var summary = false

    @Flag(help: ArgumentHelp(
        "Write every cell as it is, for machine readers.",
        discussion: "By default a cell that would start with =, +, -, @, a tab or a carriage return and is not a number gets a leading ' so that a spreadsheet shows it as text, never runs it as a formula."))
    var rawCells = false

    func validate() throws {
        guard let start = CommandLineTime.parse(from) else { throw ValidationError("--from: not an ISO 8601 date or time: \(from)") }
        guard let end = CommandLineTime.parse(to) else { throw ValidationError("--to: not an ISO 8601 date or time: \(to)") }
        guard start < end else { throw ValidationError("--from must be before --to") }
        if let asOf, CommandLineTime.parse(asOf) == nil { throw ValidationError("--as-of: not an ISO 8601 date or time: \(asOf)") }
    }

    func run() async throws {
        // Checked by `validate()`, which ran first.
        guard let start = CommandLineTime.parse(from), let end = CommandLineTime.parse(to) else { throw ExitStatus.configuration }
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let asOf = try await exportTime(connection)
            let writesCSV = !summary || output != nil
            let sink = try writesCSV ? CSVSink(path: output) : nil
            var totals = FinanceSummary()
            do {
                try sink?.write(CSV.row(FinanceReport.columns))
                let rows = try await FinanceLedger.forEachEvent(
                    connection: connection, by: by, from: start, to: end, includeSandbox: includeSandbox, asOf: asOf
                ) { event in
                    try sink?.write(CSV.row(FinanceReport.fields(event), formulaSafe: !rawCells))
                    totals.add(event)
                }
                try sink?.commit()
                logger.info("finance.exported", metadata: [
                    "finance.rows": .stringConvertible(rows), "finance.output": "\(writesCSV ? output ?? "stdout" : "none")",
                    "finance.as_of": "\(Timestamp.format(asOf))", "finance.by": "\(by.rawValue)",
                ])
            } catch {
                sink?.discard()
                throw error
            }
            if summary {
                print("Finance journal \(Timestamp.format(start)) to \(Timestamp.format(end))" + (by == .recorded ? " by recorded time" : "")
                      + ", as of \(Timestamp.format(asOf))" + (includeSandbox ? ", sandbox included" : "") + ":")
                print(totals.text(), terminator: "")
            }
            await connection.close()
        }
    }

    /// What the export is as of: the journal's last recorded moment, or the `--as-of` given if it
    /// is not later. Events may still be recorded at or before a later time, so its export could
    /// not be made again.
    private func exportTime(_ connection: PostgresConnection) async throws -> Date {
        let recorded = try await FinanceLedger.recordedUntilNow(connection: connection)
        // A text that is not a time was refused by `validate()`, which ran first.
        let given = asOf.flatMap(CommandLineTime.parse)
        if let first = try await JournalFirstRecording.unfinished(connection: connection), (given ?? recorded) >= first.queuedAt {
            throw ConfigurationError(
                "the finance journal's first recording, queued by migrate at \(Timestamp.format(first.queuedAt)), is not finished "
                + "(\(first.done) ledger rows recorded): an export now would lack the rest; run 'receipt-reconciler migrate' to finish it")
        }
        guard let given else { return recorded }
        guard given <= recorded else {
            throw ConfigurationError(
                "--as-of \(Timestamp.format(given)) is later than the journal's last recorded moment, \(Timestamp.format(recorded)): "
                + "an export of the future cannot be reproduced")
        }
        return given
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
