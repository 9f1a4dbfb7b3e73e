/// JSON's string escapes, for the writers that build JSON by hand because a measurement put
/// them there: `"` and `\` escaped, control characters as `\u00XX`, everything else as is.
public enum JSONString {
    public static func append(_ value: String, to json: inout [UInt8]) {
        json.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): json.append(contentsOf: "\\\"".utf8)
            case UInt8(ascii: "\\"): json.append(contentsOf: "\\\\".utf8)
            case 0..<0x20:
                json.append(contentsOf: "\\u00".utf8)
                json.append(hexDigits[Int(byte >> 4)])
                json.append(hexDigits[Int(byte & 0x0F)])
            default: json.append(byte)
            }
        }
        json.append(UInt8(ascii: "\""))
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}
