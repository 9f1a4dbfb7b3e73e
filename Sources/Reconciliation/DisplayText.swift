/// Text that came from the database or from Apple, made safe to print for a person.
///
/// An account id is whatever the app server stored: one with a line feed splits a line of
/// `explain` in two and can forge the next, and one with ESC or BEL reaches the terminal raw (it
/// can retitle the window or repaint the screen). Every human-readable output (explain,
/// summary.md, inspect, text logs) passes such values through here: control characters become
/// visible escapes (`\n`, `\t`, `\u001b`), and so do the invisible characters that reorder or
/// break a line (bidi controls, U+2028/U+2029). Everything else, non-ASCII letters included, is
/// kept. CSV keeps its own quoting and JSON its own escapes: neither comes through here.
public enum DisplayText {
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                result.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                let hex = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            }
        }
        return result
    }

    /// C0 and C1 controls and DEL; the bidi embeddings, overrides, isolates and marks; the line
    /// and paragraph separators.
    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069, 0x061C: true
        default: false
        }
    }
}
