import Foundation
import Testing
import TestSupport
@testable import WorldSupport

/// summary.md's tables add up: each account once, each planned correction once, checked against
/// the run's row and the corrections table.
@Suite struct ReportTotalsTests {
    /// The rows of the table under `heading`: (name, number), the bold total apart.
    static func table(_ markdown: String, under heading: String) -> (rows: [(String, Int)], total: Int?) {
        let section = markdown.components(separatedBy: "## \(heading)\n").dropFirst().first?.components(separatedBy: "\n## ").first ?? ""
        var rows: [(String, Int)] = []
        var total: Int?
        for line in section.split(separator: "\n") where line.hasPrefix("| ") && !line.hasPrefix("| outcome") && !line.hasPrefix("| kind") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 2 else { continue }
            if cells[0].hasPrefix("**") { total = Int(cells[1].replacingOccurrences(of: "*", with: "")) } else if let value = Int(cells[1]) {
                rows.append((cells[0], value))
            }
        }
        return (rows, total)
    }

    @Test func theAccountsAndCorrectionsTablesAddUpToTheRunAndItsCorrections() async throws {
        try await RunWorld.with("report-totals") { world in
            try await RunWorld.populate(world, count: 40)
            try await world.addReceipt("deferred", spec: ["faults": [["status": 21199, "is_retryable": true]], "repeat_faults": true,
                                                          "generate": ["subscriptions": [world.subscription(original: "900", endDays: 10)]]])
            let report = world.reportRoot.appending(path: "night")
            let result = try await CLIProcess.run(["run", "--report-dir", report.path], environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr.suffix(1000))")
            let markdown = try String(contentsOf: report.appending(path: "summary.md"), encoding: .utf8)
            let processed = try await world.count("SELECT accounts_processed FROM iap.reconciliation_runs")
            #expect(processed == 41)
            let accounts = Self.table(markdown, under: "Accounts by outcome")
            #expect(accounts.rows.map(\.1).reduce(0, +) == processed, "\(accounts.rows)")
            #expect(accounts.total == processed)
            #expect(accounts.rows.contains { $0.0 == "deferred" && $0.1 == 1 }, "\(accounts.rows)")
            let corrections = Self.table(markdown, under: "Corrections by kind")
            let planned = try await world.count("SELECT count(*) FROM iap.corrections WHERE run_id = 1")
            #expect(planned > 0 && corrections.rows.map(\.1).reduce(0, +) == planned, "\(corrections.rows)")
            #expect(corrections.total == planned)
        }
    }
}
