import AppStoreModels
import Foundation
import Reconciliation
import Testing

@Suite struct ProgramJSONTests {
    struct View: Encodable {
        @Nullable var missing: String?
        @Nullable var present: Int?
        let when: Date
        let path: String
    }

    @Test func keysAreSortedAbsentValuesAreNullAndTimesAreUTCSeconds() throws {
        let line = try ProgramJSON.line(View(missing: nil, present: 7, when: Date(timeIntervalSince1970: 1_700_000_000.9), path: "a/b"))
        // Derived by hand: sorted keys, `null` kept, the time as Timestamp writes it (milliseconds when there are any), `/` unescaped.
        #expect(line == #"{"missing":null,"path":"a/b","present":7,"when":"2023-11-14T22:13:20.900Z"}"#)
        let pretty = try ProgramJSON.pretty(View(missing: "x", present: nil, when: Date(timeIntervalSince1970: 0), path: ""))
        #expect(pretty.hasSuffix("}\n"))
        #expect(pretty.contains(#""present" : null"#))
    }

    /// The hand writers' escaper against JSON's own reader, on the strings an attacker would send.
    @Test func theSharedEscaperWritesStringsJSONReadsBackExactly() throws {
        let hostile = ["", "plain", "quote \" and back\\slash", "line\nfeed\r\t", "\u{0}\u{1}\u{1F}\u{7F}", "é 漢字 🧾", "\u{2028}\u{202E}", "</script>"]
        for value in hostile {
            var bytes: [UInt8] = []
            JSONString.append(value, to: &bytes)
            let back = try JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed) as? String
            #expect(back == value, "\(value.debugDescription)")
            #expect(!bytes.contains { $0 < 0x20 }, "a raw control byte in \(value.debugDescription)")
        }
    }
}
