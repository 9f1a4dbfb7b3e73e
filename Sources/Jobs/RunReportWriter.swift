import Foundation
import Reconciliation
import Storage

/// A receipt that did not verify, as `failures.csv` lists it.
public struct FailureRecord: Sendable {
    public var accountId: String
    public var receiptId: Int64
    public var outcome: String
    public var appleStatus: Int?
    public var attempts: Int
    public var endpoints: String
    public var reason: String
}

/// Writes a run's report files under the report directory: `failures.csv` as the run goes (so
/// memory stays flat), then `corrections.csv` (streamed from the database), `summary.json` and
/// `summary.md`. Files are written to a temporary name and renamed, so a reader never sees half a file.
public final class RunReportWriter: @unchecked Sendable {
    // Used by the run's writer task only, one batch at a time.
    public let directory: URL
    /// Open until `finish`.
    private var failures: FileHandle?
    private let failuresTemporary: URL

    public static let failuresHeader = ["account_id", "receipt_id", "outcome", "apple_status", "attempts", "endpoints", "reason"]
    public static let correctionsHeader = [
        "correction_id", "account_id", "product_id", "kind", "reason", "status", "applied_at", "before_state",
        "after_state", "before_expires_at", "after_expires_at", "environment",
    ]

    init(directory: URL) throws {
        self.directory = directory
        failuresTemporary = directory.appending(path: ".failures.csv.partial")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: failuresTemporary.path, contents: Data(CSV.row(Self.failuresHeader).utf8)) else {
                throw ReportError(description: "cannot write the report in \(directory.path)")
            }
            failures = try FileHandle(forWritingTo: failuresTemporary)
            try failures?.seekToEnd()
        } catch let error as ReportError {
            throw error
        } catch {
            throw ReportError(description: "cannot write the report in \(directory.path): \(error.localizedDescription)")
        }
    }

    func appendFailures(_ records: [FailureRecord]) throws {
        guard let failures, !records.isEmpty else { return }
        var text = ""
        for record in records {
            text += CSV.row([record.accountId, String(record.receiptId), record.outcome, record.appleStatus.map(String.init),
                             String(record.attempts), record.endpoints, record.reason])
        }
        do {
            try failures.write(contentsOf: Data(text.utf8))
        } catch {
            throw ReportError(description: "cannot write failures.csv in \(directory.path): \(error.localizedDescription)")
        }
    }

    func finish(summary: RunSummary, store: ReconciliationStore) async throws {
        try? failures?.close()
        failures = nil
        try Self.moveIntoPlace(failuresTemporary, directory.appending(path: "failures.csv"))
        try await Self.writeCorrections(runId: summary.runId, store: store, to: directory.appending(path: "corrections.csv"))
        try Self.write(RunReport.json(summary), to: directory.appending(path: "summary.json"))
        try Self.write(RunReport.markdown(summary), to: directory.appending(path: "summary.md"))
    }

    /// `corrections.csv` of any run, streamed from the database.
    public static func writeCorrections(runId: Int64, store: ReconciliationStore, to url: URL) async throws {
        let temporary = url.deletingLastPathComponent().appending(path: "." + url.lastPathComponent + ".partial")
        guard FileManager.default.createFile(atPath: temporary.path, contents: Data(CSV.row(correctionsHeader).utf8)) else {
            throw ReportError(description: "cannot write \(url.path)")
        }
        let handle = try FileHandle(forWritingTo: temporary)
        defer { try? handle.close() }
        try handle.seekToEnd()
        var buffer = ""
        try await store.forEachCorrection(runId: runId) { record in
            buffer += CSV.row(RunReport.correctionFields(record))
            if buffer.utf8.count > 1 << 16 {
                try handle.write(contentsOf: Data(buffer.utf8))
                buffer = ""
            }
        }
        do {
            try handle.write(contentsOf: Data(buffer.utf8))
        } catch {
            throw ReportError(description: "cannot write \(url.path): \(error.localizedDescription)")
        }
        try Self.moveIntoPlace(temporary, url)
    }

    static func write(_ text: String, to url: URL) throws {
        do {
            try Data(text.utf8).write(to: url, options: .atomic)
        } catch {
            throw ReportError(description: "cannot write \(url.path): \(error.localizedDescription)")
        }
    }

    /// rename(2): atomic, and replaces an older file of the same name.
    public static func moveIntoPlace(_ temporary: URL, _ url: URL) throws {
        guard rename(temporary.path, url.path) == 0 else {
            throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
    }
}

/// A report or export file could not be written (full disk, no permission): says which file.
public struct ReportError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}
