import Foundation
/// RFC 4180 fields: quoted when they hold a comma, a quote, CR or LF; quotes doubled.
///
/// Finance opens these files in a spreadsheet, where a cell starting with `=`, `+`, `-`, `@`, a
/// tab or a carriage return is a live formula (`=HYPERLINK(...)` in an account id chosen by a
/// customer). Such a cell that is not a number gets a leading `'` (OWASP's rule against formula
/// injection, docs/reports.md, "Finance audit CSV"); nothing else about a value changes. `formulaSafe: false` is
/// for machine readers (`export-finance --raw-cells`).
public enum CSV {
    public static func field(_ value: String?, formulaSafe: Bool = true) -> String {
        guard var value else { return "" }
        if formulaSafe, let first = value.utf8.first, Self.formulaStarts.contains(first), !Self.isNumber(value) {
            value = "'" + value
        }
        guard value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// One record, CRLF-terminated as RFC 4180 says.
    public static func row(_ fields: [String?], formulaSafe: Bool = true) -> String {
        fields.map { field($0, formulaSafe: formulaSafe) }.joined(separator: ",") + "\r\n"
    }

    private static let formulaStarts: Set<UInt8> = [UInt8(ascii: "="), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "@"), 0x09, 0x0D]

    /// A plain decimal number (`-3`, `-0.99`, `+1.5e3`): a spreadsheet reads it as the number it is.
    static func isNumber(_ text: String) -> Bool {
        var bytes = Array(text.utf8)[...]
        if let sign = bytes.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") { bytes = bytes.dropFirst() }
        func digits() -> Int {
            let count = bytes.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }.count
            bytes = bytes.dropFirst(count)
            return count
        }
        var mantissa = digits()
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            mantissa += digits()
        }
        guard mantissa > 0 else { return false }
        if let e = bytes.first, e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            if let sign = bytes.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") { bytes = bytes.dropFirst() }
            guard digits() > 0 else { return false }
        }
        return bytes.isEmpty
    }
}
