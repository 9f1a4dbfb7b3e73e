import AppleSimulator
import Foundation
import Postgres
import TestSupport
import Testing
@testable import WorldSupport

/// Issue 29, item 4: an id or a type that came from the database or from Apple never reaches a
/// person's output raw. An account id with a line feed cannot forge a line, one with ESC or BEL
/// cannot drive the terminal: summary.md, the printed summary, text logs and inspect escape them.
@Suite struct DisplaySafetyTests {
    /// Forges a log line and retitles the terminal, if printed raw.
    static let hostile = "evil\n2026-01-01T00:00:00.000Z notice forged line\u{1b}]0;owned\u{07}"
    static let escaped = "evil\\n2026-01-01T00:00:00.000Z notice forged line\\u001b]0;owned\\u0007"

    /// No control character but the line feeds that end lines.
    static func isClean(_ text: String) -> Bool {
        !text.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) }
    }

    @Test func aRunsReportAndLogsEscapeHostileIdsAndTypes() async throws {
        try await RunWorld.with("display-safety") { world in
            // Apple names another app's bundle for the hostile account: its id is listed in summary.md.
            try await world.addReceipt(Self.hostile, spec: ["generate": [
                "bundle_id": "com.other.app", "purchases": [["product_id": "lifetime", "transaction_id": "20"]]]])
            // A notification with a hostile type and the wrong password: logged and counted by its type.
            let body = String(decoding: try JSONSerialization.data(withJSONObject: [
                "notification_type": Self.hostile, "password": "not-the-secret", "unified_receipt": [String: Any](),
            ]), as: UTF8.self)
            try await world.connection.execute("INSERT INTO iap.notifications (body) VALUES (\(body)::jsonb)")
            let reports = world.reportRoot.appending(path: "run").path
            let result = try await CLIProcess.run(["run", "--report-dir", reports, "--log-format", "text"],
                                                  environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr)")
            #expect(Self.isClean(result.stdout) && Self.isClean(result.stderr), "\(result.stderr.debugDescription)")
            // Every log line is one line that starts with its time: nothing forged one.
            let lines = result.stderr.split(separator: "\n")
            #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("20") && !$0.hasPrefix("2026-01-01T00:00:00.000Z notice") })
            #expect(result.stderr.contains("notification.type=\(Self.escaped)"), "\(result.stderr)")
            let markdown = try String(contentsOfFile: reports + "/summary.md", encoding: .utf8)
            #expect(Self.isClean(markdown))
            #expect(markdown.contains("| \(Self.escaped) |"), "\(markdown)")
            #expect(markdown.contains(Self.escaped + " "), "the bundle mismatch names the account: \(markdown)")
            #expect(!markdown.contains("\nforged") && !markdown.contains("\n2026-01-01T00:00:00.000Z"))
            // The CSV keeps the id exactly, in its own quoting.
            let failures = try String(contentsOfFile: reports + "/failures.csv", encoding: .utf8)
            #expect(failures.contains("\"" + Self.hostile + "\""))
        }
    }

    /// Characters that reorder or break a line without being control characters: bidi overrides
    /// and isolates (an id that reads backwards), U+2028 and U+2029 (a line break to many
    /// terminals and editors). An account id carrying them, through a whole run from the command
    /// line: the printed summary, text logs and summary.md show them escaped, never raw.
    @Test func bidiControlsAndLineSeparatorsAreEscapedEndToEnd() async throws {
        let reordering: [Unicode.Scalar] = ["\u{202E}", "\u{202D}", "\u{2066}", "\u{2067}", "\u{2068}", "\u{2069}", "\u{200E}", "\u{200F}",
                                            "\u{2028}", "\u{2029}"]
        let account = "acct" + String(String.UnicodeScalarView(reordering)) + "exe.txt"
        try await RunWorld.with("bidi") { world in
            try await world.addReceipt(account, spec: ["generate": [
                "bundle_id": "com.other.app", "purchases": [["product_id": "lifetime", "transaction_id": "21"]]]])
            let reports = world.reportRoot.appending(path: "run").path
            let result = try await CLIProcess.run(["run", "--report-dir", reports, "--log-format", "text", "--log-level", "debug"],
                                                  environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr)")
            let markdown = try String(contentsOfFile: reports + "/summary.md", encoding: .utf8)
            #expect(markdown.contains("acct\\u202e"), "the bundle mismatch names the account, escaped: \(markdown)")
            for (name, text) in [("stdout", result.stdout), ("stderr", result.stderr), ("summary.md", markdown)] {
                #expect(!text.unicodeScalars.contains { reordering.contains($0) }, "\(name) carries a raw reordering character")
            }
        }
    }

    @Test func inspectEscapesWhatTheSignerWrote() async throws {
        let chain = try SigningChain.create()
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-display-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data(chain.root).write(to: directory.appending(path: "root.der"))
        let payload: [String: Any] = [
            "transactionId": "1", "originalTransactionId": "1", "productId": Self.hostile, "bundleId": "com.example.app",
            "environment": "Sandbox", "purchaseDate": 1_700_000_000_000, "signedDate": 1_700_000_000_000,
        ]
        let jws = try chain.sign(Array(try JSONSerialization.data(withJSONObject: payload)))
        let file = directory.appending(path: "transaction.jws")
        try jws.write(to: file, atomically: true, encoding: .utf8)
        let result = try await CLIProcess.run(
            ["inspect", "--apple-root-certificate", directory.appending(path: "root.der").path, "--bundle-id", "com.example.app", file.path],
            environment: SignedDataCLITests.bare)
        #expect(result.status == 0, "\(result.stdout)")
        #expect(Self.isClean(result.stdout))
        #expect(result.stdout.contains("productId              \(Self.escaped)\n"), "\(result.stdout)")
    }
}
