/// RFC 4180 fields: quoted when they hold a comma, a quote, CR or LF; quotes doubled.
public enum CSV {
    public static func field(_ value: String?) -> String {
        guard let value else { return "" }
        guard value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// One record, CRLF-terminated as RFC 4180 says.
    public static func row(_ fields: [String?]) -> String {
        fields.map(field).joined(separator: ",") + "\r\n"
    }
}
