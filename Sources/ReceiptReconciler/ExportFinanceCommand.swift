import ArgumentParser
import Foundation
import Postgres
import Jobs
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

    func validate() throws {
        guard let start = parseTime(from) else { throw ValidationError("--from: not an ISO 8601 date or time: \(from)") }
        guard let end = parseTime(to) else { throw ValidationError("--to: not an ISO 8601 date or time: \(to)") }
        guard start < end else { throw ValidationError("--from must be before --to") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let sink = try CSVSink(path: output)
            do {
                let rows = try await FinanceExport.export(
                    connection: connection, from: parseTime(from)!, to: parseTime(to)!, includeSandbox: includeSandbox,
                    write: sink.write)
                try sink.commit()
                logger.info("finance.exported", metadata: ["rows": "\(rows)", "output": "\(output ?? "stdout")"])
            } catch {
                sink.discard()
                throw error
            }
            await connection.close()
        }
    }
}

/// Stdout, or a file written aside and renamed into place when complete. Buffers 64 KB at a time;
/// every failure (a full disk) names the file and leaves no partial file behind.
final class CSVSink {
    private let handle: FileHandle
    private let temporary: String?
    private let path: String?
    private var buffer = ""

    init(path: String?) throws {
        self.path = path
        guard let path else {
            handle = FileHandle.standardOutput
            temporary = nil
            return
        }
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/." + (path as NSString).lastPathComponent + ".partial"
        guard FileManager.default.createFile(atPath: temporary, contents: nil),
              let handle = FileHandle(forWritingAtPath: temporary)
        else { throw ReportError(description: "cannot write \(path): \(String(cString: strerror(errno)))") }
        self.handle = handle
        self.temporary = temporary
    }

    func write(_ text: String) throws {
        buffer += text
        if buffer.utf8.count >= 1 << 16 { try flush() }
    }

    func commit() throws {
        try flush()
        guard let temporary, let path else { return }
        do {
            try handle.synchronize()
            try handle.close()
        } catch {
            throw ReportError(description: "cannot write \(path): \(RunReportWriter.reason(error))")
        }
        try RunReportWriter.moveIntoPlace(URL(filePath: temporary), URL(filePath: path))
    }

    func discard() {
        guard let temporary else { return }
        try? handle.close()
        unlink(temporary)
    }

    private func flush() throws {
        guard !buffer.isEmpty else { return }
        do {
            try handle.write(contentsOf: Data(buffer.utf8))
            buffer = ""
        } catch {
            throw ReportError(description: "cannot write \(path ?? "stdout"): \(RunReportWriter.reason(error))")
        }
    }
}
