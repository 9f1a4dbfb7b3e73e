import Reconciliation
import Testing

/// Values from the database or Apple, escaped for a person's screen: every control character
/// and every invisible reordering character becomes visible; nothing else changes.
@Suite struct DisplayTextTests {
    @Test(arguments: [
        ("acct-42", "acct-42"),
        ("line\nbreak", "line\\nbreak"),
        ("cr\r\ttab", "cr\\r\\ttab"),
        ("\u{1b}]0;owned\u{07}", "\\u001b]0;owned\\u0007"),
        ("\u{1b}[2J", "\\u001b[2J"),
        ("nul\u{0}", "nul\\u0000"),
        ("del\u{7f} c1\u{85}\u{9b}", "del\\u007f c1\\u0085\\u009b"),
        ("abc\u{202e}fed", "abc\\u202efed"),
        ("\u{2066}x\u{2069}\u{200f}", "\\u2066x\\u2069\\u200f"),
        ("para\u{2028}graph\u{2029}", "para\\u2028graph\\u2029"),
        ("Zoë 漢字 🙂 back\\slash", "Zoë 漢字 🙂 back\\slash"),
        ("", ""),
    ])
    func controlCharactersBecomeVisible(input: String, expected: String) {
        #expect(DisplayText.escaped(input) == expected)
        #expect(!DisplayText.escaped(input).unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
    }
}
