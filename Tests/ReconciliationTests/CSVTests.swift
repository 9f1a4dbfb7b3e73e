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
