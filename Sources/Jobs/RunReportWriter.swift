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
        } catch {
            throw ReportError(description: "cannot create the report directory \(directory.path): \(Self.reason(error))")
        }
        failures = try Self.create(failuresTemporary, naming: directory.appending(path: "failures.csv"),
                                   header: CSV.row(Self.failuresHeader))
    }

    func appendFailures(_ records: [FailureRecord]) throws {
        guard let failures, !records.isEmpty else { return }
        var text = ""
        for record in records {
            text += CSV.row([record.accountId, String(record.receiptId), record.outcome, record.appleStatus.map(String.init),
                             String(record.attempts), record.endpoints, record.reason])
        }
        try Self.write(text, to: failures, naming: directory.appending(path: "failures.csv"))
    }

    /// Writes the rest of the report. On failure (a full disk) no partial file is left behind: the
    /// files already in place are whole, and the missing ones can be written later with `report`.
    func finish(summary: RunSummary, store: ReconciliationStore) async throws {
        try? failures?.close()
        failures = nil
        do {
            try Self.moveIntoPlace(failuresTemporary, directory.appending(path: "failures.csv"))
        } catch {
            try? FileManager.default.removeItem(at: failuresTemporary)
            throw error
        }
        try await Self.writeCorrections(runId: summary.runId, store: store, to: directory.appending(path: "corrections.csv"))
        try Self.write(RunReport.json(summary), to: directory.appending(path: "summary.json"))
        try Self.write(RunReport.markdown(summary), to: directory.appending(path: "summary.md"))
    }

    /// `corrections.csv` of any run, streamed from the database.
    public static func writeCorrections(runId: Int64, store: ReconciliationStore, to url: URL) async throws {
        let temporary = partialName(url)
        let handle = try create(temporary, naming: url, header: CSV.row(correctionsHeader))
        do {
            var buffer = ""
            try await store.forEachCorrection(runId: runId) { record in
                buffer += CSV.row(RunReport.correctionFields(record))
                if buffer.utf8.count > 1 << 16 {
                    try write(buffer, to: handle, naming: url)
                    buffer = ""
                }
            }
            try write(buffer, to: handle, naming: url)
            try close(handle, naming: url)
            try moveIntoPlace(temporary, url)
        } catch {
            try? handle.close()
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    static func write(_ text: String, to url: URL) throws {
        let temporary = partialName(url)
        do {
            let handle = try create(temporary, naming: url, header: text)
            try close(handle, naming: url)
            try moveIntoPlace(temporary, url)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    /// rename(2): atomic, and replaces an older file of the same name.
    public static func moveIntoPlace(_ temporary: URL, _ url: URL) throws {
        guard rename(temporary.path, url.path) == 0 else {
            throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
    }

    /// `.name.partial` beside `url`: the name a file has until it is whole.
    static func partialName(_ url: URL) -> URL {
        url.deletingLastPathComponent().appending(path: "." + url.lastPathComponent + ".partial")
    }

    /// Creates `temporary` holding `header`; errors name `url`, the file the reader expects.
    private static func create(_ temporary: URL, naming url: URL, header: String) throws -> FileHandle {
        guard FileManager.default.createFile(atPath: temporary.path, contents: nil) else {
            throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
        let handle: FileHandle
        do {
            handle = try FileHandle(forWritingTo: temporary)
        } catch {
            throw ReportError(description: "cannot write \(url.path): \(reason(error))")
        }
        do {
            try write(header, to: handle, naming: url)
        } catch {
            try? handle.close()
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
        return handle
    }

    private static func write(_ text: String, to handle: FileHandle, naming url: URL) throws {
        do {
            try handle.write(contentsOf: Data(text.utf8))
        } catch {
            throw ReportError(description: "cannot write \(url.path): \(reason(error))")
        }
    }

    /// Flushes to the disk, so a full disk shows here and not after the rename.
    private static func close(_ handle: FileHandle, naming url: URL) throws {
        do {
            try handle.synchronize()
            try handle.close()
        } catch {
            throw ReportError(description: "cannot write \(url.path): \(reason(error))")
        }
    }

    /// The operating system's words for a failure ("No space left on device"), not Foundation's wrapper.
    public static func reason(_ error: Error) -> String {
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
