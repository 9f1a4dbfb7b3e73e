import AppStoreModels
import Foundation
import ReportOutput
import Reconciliation
import Storage

/// Writes a run's report files under the report directory: `failures.csv` as the run goes (so
/// memory stays flat), then `corrections.csv` (streamed from the database), `summary.json` and
/// `summary.md`, each a `ReportFile`, so a reader never sees half a file.
///
/// `@unchecked Sendable`: used by one task at a time, never two at once: the run's writer task
/// while batches are written, then the run's own task once the writer has returned (the
/// suspects, then `finish`).
public final class RunReportWriter: @unchecked Sendable {
    public let directory: URL
    /// Open until `finish`.
    private let failures: ReportFile
    /// `--source both` only.
    private let disagreements: ReportFile?

    public static let disagreementsHeader = ["account_id", "kind", "product_id", "transaction_id", "verify_receipt", "server_api"]

    public static let failuresHeader = ["account_id", "receipt_id", "outcome", "apple_status", "attempts", "endpoints", "reason"]
    public static let correctionsHeader = [
        "correction_id", "account_id", "product_id", "kind", "reason", "status", "applied_at", "before_state",
        "after_state", "before_expires_at", "after_expires_at", "environment",
    ]

    init(directory: URL, crossCheck: Bool = false) throws {
        self.directory = directory
        do {
            // A directory this run creates lets no one but its owner's group look in (0750).
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750])
        } catch {
            throw ReportError(description: "cannot create the report directory \(directory.path): \(ReportFile.reason(error))")
        }
        failures = try ReportFile(directory.appending(path: "failures.csv"), header: CSV.row(Self.failuresHeader))
        disagreements = crossCheck
            ? try ReportFile(directory.appending(path: "disagreements.csv"), header: CSV.row(Self.disagreementsHeader)) : nil
    }

    /// Appends a batch's disagreements between the two sources.
    func appendDisagreements(_ records: [Disagreement]) throws {
        guard let disagreements, !records.isEmpty else { return }
        for record in records {
            try disagreements.write(CSV.row([
                record.accountId, record.kind.rawValue, record.productId, record.transactionId, record.verifyReceipt, record.serverAPI,
            ]))
        }
        try disagreements.flush()
    }

    /// Lists the notifications this run quarantined (`notification ID: reason`) as failures.csv rows of
    /// no account or receipt, outcome `quarantined`.
    func appendQuarantined(_ notifications: [String]) throws {
        guard !notifications.isEmpty else { return }
        for line in notifications {
            try failures.write(CSV.row(["", "", "quarantined", nil, String(NotificationStore.quarantineAfterUnfinishedStarts), "", line]))
        }
        try failures.flush()
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
        try disagreements?.commit()
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
    public static func write(_ text: String, to url: URL) throws {
        try ReportFile(url, header: text).commit()
    }
}
