import ArgumentParser
import CivilCalendar
import Foundation
import Logging
import Postgres
import Reconciliation
import Storage

/// `corrections --after SEQ`: the corrections table read as an outbox (docs/events.md).
struct CorrectionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "corrections",
        abstract: "Lists applied corrections after a cursor, in the order they were committed: the outbox an app consumes.",
        discussion: """
            Each applied correction has an applied_seq, given in commit order (a correction planned early and \
            applied late, by the run that took over a killed one, comes after what was committed before it). \
            Save the last applied_seq you handled and pass it as --after next time: every applied correction \
            reaches you exactly once, however runs end. Planned, superseded and dry-run corrections are never \
            listed. --json writes one JSON object a line (JSON Lines) with the entitlement row before and after.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: ArgumentHelp("List corrections whose applied_seq is greater than this (0: from the first).", valueName: "applied-seq"))
    var after: Int64 = 0

    @Option(help: "List at most this many (default: all).")
    var limit: Int?

    @Flag(help: "One JSON object a line, with the entitlement row before and after.")
    var json = false

    func validate() throws {
        guard after >= 0 else { throw ValidationError("--after must be 0 or more") }
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let sink = try CSVSink(path: nil)
            if !json {
                try sink.write(["APPLIED_SEQ", "ID", "RUN", "APPLIED_AT", "ACCOUNT", "PRODUCT", "KIND", "REASON"].joined(separator: "\t") + "\n")
            }
            var last = after
            let count = try await CorrectionsOutbox.forEach(connection: connection, after: after, limit: limit) { correction in
                last = correction.appliedSeq
                try sink.write(json ? try ProgramJSON.line(AppliedCorrectionLine(correction)) + "\n" : Self.textLine(correction))
            }
            try sink.commit()
            await connection.close()
            logger.info("corrections.listed", metadata: ["corrections.count": .stringConvertible(count), "corrections.last_applied_seq": .stringConvertible(last)])
        }
    }

    /// Tab-separated; every value came from the database and is escaped, a tab in a reason included.
    static func textLine(_ correction: AppliedCorrection) -> String {
        TabSeparated.line([String(correction.appliedSeq), String(correction.id), String(correction.runId), Timestamp.format(correction.appliedAt),
                           correction.accountId, correction.productId, correction.kind.rawValue, correction.reason])
    }
}

/// The text layout of the listing commands (`corrections`, `runs`): one line, tab-separated, each
/// value escaped, so that a tab or a line feed in a value can neither shift a column nor add a line.
enum TabSeparated {
    static func line(_ fields: [String]) -> String {
        fields.map(DisplayText.escaped).joined(separator: "\t") + "\n"
    }
}

/// One line of `corrections --json` (docs/events.md): every key always present.
struct AppliedCorrectionLine: Encodable {
    let appliedSeq: Int64
    let id: Int64
    let runId: Int64
    let accountId: String
    let productId: String
    let kind: String
    let reason: String
    let appliedAt: Date
    @Nullable var before: JSONValue?
    @Nullable var after: JSONValue?

    enum CodingKeys: String, CodingKey {
        case appliedSeq = "applied_seq", id, runId = "run_id", accountId = "account_id", productId = "product_id", kind, reason
        case appliedAt = "applied_at", before, after
    }

    init(_ correction: AppliedCorrection) throws {
        appliedSeq = correction.appliedSeq
        id = correction.id
        runId = correction.runId
        accountId = correction.accountId
        productId = correction.productId
        kind = correction.kind.rawValue
        reason = correction.reason
        appliedAt = correction.appliedAt
        before = try correction.before.map { try JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) }
        after = try correction.after.map { try JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) }
    }
}
