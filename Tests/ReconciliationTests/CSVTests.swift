import Foundation
import Reconciliation
import Testing

/// RFC 4180 quoting and docs/reports.md, "Finance audit CSV"'s rule against spreadsheet formulas.
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

/// The finance CSV's cells for one event: every column in docs/reports.md's order, dates in the
/// one timestamp format, flags and numbers as text, absent values empty.
@Suite struct FinanceReportTests {
    @Test func anEventBecomesItsCellsInTheContractsOrder() {
        var refund = FinanceEvent(
            kind: .refund, time: Date(timeIntervalSince1970: 1_763_199_000.5), accountId: "carol", productId: "lifetime",
            productType: "non_consumable", transactionId: "3000", originalTransactionId: "3000", webOrderLineItemId: nil,
            purchaseDate: Date(timeIntervalSince1970: 1_762_000_000), expiresDate: nil,
            cancellationDate: Date(timeIntervalSince1970: 1_763_199_000.5), cancellationReason: 1, quantity: 1,
            isTrialPeriod: false, isInIntroOfferPeriod: nil, offerCodeRefName: nil, promotionalOfferId: nil,
            ownershipType: "PURCHASED", environment: "Production", price: 59_990, currency: "USD",
            recordedAt: Date(timeIntervalSince1970: 1_763_300_000.25))
        refund.amount = -43_493
        refund.amountSource = .signed
        refund.revocationType = "REFUND_PRORATED"
        refund.revocationPercentage = 72_500
        refund.storefront = "USA"
        #expect(FinanceReport.columns.count == 28)
        #expect(FinanceReport.fields(refund) == [
            "refund", "2025-11-15T09:30:00.500Z", "carol", "lifetime", "non_consumable", "3000", "3000", nil,
            "2025-11-01T12:26:40.000Z", nil, "2025-11-15T09:30:00.500Z", "1", "1", "false", nil, nil, nil, "PURCHASED",
            "Production", "59.99", "USD", "-43.493", "signed", "REFUND_PRORATED", "72500", "USA", "2025-11-16T13:33:20.250Z", nil,
        ])
        refund.kind = .adjustment
        refund.adjusts = .refund
        #expect(FinanceReport.fields(refund).first == "adjustment")
        #expect(FinanceReport.fields(refund).last == "refund")
    }

    /// Money as text, by hand: milliunits to plain decimals, at most three places, no exponent.
    @Test(arguments: [
        (Int64(0), "0"), (59_990, "59.99"), (-16_500, "-16.5"), (230_000, "230"), (1, "0.001"), (-1, "-0.001"), (10, "0.01"),
        (1_000_001, "1000.001"), (Int64.max, "9223372036854775.807"), (Int64.min, "-9223372036854775.808"),
    ])
    func moneyIsWrittenAsPlainDecimals(milliunits: Int64, text: String) {
        #expect(MoneyText.decimal(milliunits: milliunits) == text)
    }

    /// Sums (`--summary`) by the same rule, past `Int64` too: 10 x Int64.max + 5 milliunits.
    @Test func sumsAreWrittenByTheSameRule() {
        #expect(MoneyText.decimal(milliunits: Int128(Int64.max) * 10 + 5) == "92233720368547758.075")
        #expect(MoneyText.decimal(milliunits: -(Int128(Int64.max) * 10 + 500)) == "-92233720368547758.57")
        #expect(MoneyText.decimal(milliunits: Int128(10_500)) == "10.5")
    }
}
