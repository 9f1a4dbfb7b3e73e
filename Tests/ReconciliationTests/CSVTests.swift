import Foundation
import Reconciliation
import Testing

/// RFC 4180 quoting and contract section 7's rule against spreadsheet formulas.
@Suite struct CSVTests {
    static let cells: [(String?, String, String)] = [
        // value, formula-safe, raw
        (nil, "", ""),
        ("plain", "plain", "plain"),
        ("=HYPERLINK(\"http://evil\",\"x\")", "\"'=HYPERLINK(\"\"http://evil\"\",\"\"x\"\")\"", "\"=HYPERLINK(\"\"http://evil\"\",\"\"x\"\")\""),
        ("+SUM(1+1)", "'+SUM(1+1)", "+SUM(1+1)"),
        ("@SUM(A1)", "'@SUM(A1)", "@SUM(A1)"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0"),
        ("\tTAB", "'\tTAB", "\tTAB"),
        ("\r=1", "\"'\r=1\"", "\"\r=1\""),
        ("-3", "-3", "-3"),
        ("-0.99", "-0.99", "-0.99"),
        ("+1.5e3", "+1.5e3", "+1.5e3"),
        ("-", "'-", "-"),
        ("-1e", "'-1e", "-1e"),
        ("-inf", "'-inf", "-inf"),
        ("a=b", "a=b", "a=b"),
        ("with, comma", "\"with, comma\"", "\"with, comma\""),
    ]

    @Test(arguments: cells)
    func aCellIsQuotedAndNeverAFormula(value: String?, safe: String, raw: String) {
        #expect(CSV.field(value) == safe)
        #expect(CSV.field(value, formulaSafe: false) == raw)
    }

    @Test func aRowEndsInCRLF() {
        #expect(CSV.row(["=1", "2", nil]) == "'=1,2,\r\n")
        #expect(CSV.row(["=1", "2", nil], formulaSafe: false) == "=1,2,\r\n")
    }
}

/// The finance CSV's cells for one event: every column in the contract's order, dates in the
/// one timestamp format, flags and numbers as text, absent values empty.
@Suite struct FinanceReportTests {
    @Test func anEventBecomesItsCellsInTheContractsOrder() {
        let refund = FinanceEvent(
            kind: .refund, time: Date(timeIntervalSince1970: 1_763_199_000.5), accountId: "carol", productId: "lifetime",
            productType: "non_consumable", transactionId: "3000", originalTransactionId: "3000", webOrderLineItemId: nil,
            purchaseDate: Date(timeIntervalSince1970: 1_762_000_000), expiresDate: nil,
            cancellationDate: Date(timeIntervalSince1970: 1_763_199_000.5), cancellationReason: 1, quantity: 1,
            isTrialPeriod: false, isInIntroOfferPeriod: nil, offerCodeRefName: nil, promotionalOfferId: nil,
            ownershipType: "PURCHASED", environment: "Production", price: "49.99", currency: "USD")
        #expect(FinanceReport.columns.count == 21)
        #expect(FinanceReport.fields(refund) == [
            "refund", "2025-11-15T09:30:00.500Z", "carol", "lifetime", "non_consumable", "3000", "3000", nil,
            "2025-11-01T12:26:40.000Z", nil, "2025-11-15T09:30:00.500Z", "1", "1", "false", nil, nil, nil, "PURCHASED",
            "Production", "49.99", "USD",
        ])
    }
}
