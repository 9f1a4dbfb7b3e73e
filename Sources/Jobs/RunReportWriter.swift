import AppStoreModels
import Foundation
import Reconciliation
import Storage

/// A receipt that did not verify, as `failures.csv` lists it.
public struct FailureRecord: Sendable {
    public var accountId: String
    public var receiptId: Int64
    public var outcome: ReceiptOutcome
    public var appleStatus: Int?
    public var attempts: Int
    public var endpoints: String
    public var reason: String
}

/// Writes a run's report files under the report directory: `failures.csv` as the run goes (so
/// memory stays flat), then `corrections.csv` (streamed from the database), `summary.json` and
/// `summary.md`, each a `ReportFile`, so a reader never sees half a file.
public final class RunReportWriter: @unchecked Sendable {
    // Used by the run's writer task only, one batch at a time.
    public let directory: URL
    /// Open until `finish`.
    private let failures: ReportFile

    public static let failuresHeader = ["account_id", "receipt_id", "outcome", "apple_status", "attempts", "endpoints", "reason"]
    public static let correctionsHeader = [
        "correction_id", "account_id", "product_id", "kind", "reason", "status", "applied_at", "before_state",
        "after_state", "before_expires_at", "after_expires_at", "environment",
    ]

    init(directory: URL) throws {
        self.directory = directory
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw ReportError(description: "cannot create the report directory \(directory.path): \(ReportFile.reason(error))")
        }
        failures = try ReportFile(directory.appending(path: "failures.csv"), header: CSV.row(Self.failuresHeader))
    }

    /// Appends a batch's failures and writes them through, so a full disk stops the run here.
    func appendFailures(_ records: [FailureRecord]) throws {
        guard !records.isEmpty else { return }
        for record in records {
            try failures.write(CSV.row([record.accountId, String(record.receiptId), record.outcome.rawValue, record.appleStatus.map(String.init),
                                        String(record.attempts), record.endpoints, record.reason]))
        }
        try failures.flush()
    }

    /// Writes the rest of the report. On failure (a full disk) no partial file is left behind: the
    /// files already in place are whole, and the missing ones can be written later with `report`.
    func finish(summary: RunSummary, store: ReconciliationStore) async throws {
        try failures.commit()
        try await Self.writeCorrections(runId: summary.runId, store: store, to: directory.appending(path: "corrections.csv"))
        try Self.write(RunReport.json(summary), to: directory.appending(path: "summary.json"))
        try Self.write(RunReport.markdown(summary), to: directory.appending(path: "summary.md"))
    }

    /// `corrections.csv` of any run, streamed from the database.
    public static func writeCorrections(runId: Int64, store: ReconciliationStore, to url: URL) async throws {
        let file = try ReportFile(url, header: CSV.row(correctionsHeader))
        do {
            try await store.forEachCorrection(runId: runId) { try file.write(CSV.row(RunReport.correctionFields($0))) }
        } catch {
            file.discard()
            throw error
        }
        try file.commit()
    }

    /// A whole small file (a summary, the metrics file).
    static func write(_ text: String, to url: URL) throws {
        try ReportFile(url, header: text).commit()
    }
}

/// A report or export file written aside as `.name.partial` and renamed into place (rename(2):
/// atomic, replacing an older file of the same name) once whole and flushed to the disk.
/// Writes are buffered 64 KB at a time; every failure (a full disk) names the file the reader
/// expects and the operating system's reason, and `commit` leaves no partial file when it fails.
public final class ReportFile {
    public let url: URL
    private let temporary: URL
    private var handle: FileHandle?
    private var buffer = ""

    /// Creates the partial file and writes `header` through at once, so a full disk shows now.
    public init(_ url: URL, header: String = "") throws {
        self.url = url
        temporary = url.deletingLastPathComponent().appending(path: "." + url.lastPathComponent + ".partial")
        guard FileManager.default.createFile(atPath: temporary.path, contents: nil) else {
            throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
        do {
            handle = try FileHandle(forWritingTo: temporary)
            buffer = header
            try flush()
        } catch {
            discard()
            throw error is ReportError ? error : failure(error)
        }
    }

    public func write(_ text: String) throws {
        buffer += text
        if buffer.utf8.count >= 1 << 16 { try flush() }
    }

    /// Writes what is buffered to the file.
    public func flush() throws {
        guard !buffer.isEmpty, let handle else { return }
        do {
            try handle.write(contentsOf: Data(buffer.utf8))
        } catch {
            throw failure(error)
        }
        buffer = ""
    }

    /// Flushes to the disk (so a full disk shows here, not after the rename) and renames into place.
    public func commit() throws {
        do {
            try flush()
            do {
                try handle?.synchronize()
                try handle?.close()
                handle = nil
            } catch {
                throw failure(error)
            }
            guard rename(temporary.path, url.path) == 0 else {
                throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
            }
        } catch {
            discard()
            throw error
        }
    }

    /// Closes and removes the partial file.
    public func discard() {
        try? handle?.close()
        handle = nil
        unlink(temporary.path)
    }

    private func failure(_ error: any Error) -> ReportError {
        ReportError(description: "cannot write \(url.path): \(Self.reason(error))")
    }

    /// The operating system's words for a failure ("No space left on device"), not Foundation's wrapper.
    public static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        if nsError.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(nsError.code))) }
        return error.localizedDescription
    }
}

/// A report or export file could not be written (full disk, no permission): says which file.
public struct ReportError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}
