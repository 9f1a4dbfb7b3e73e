import AppStoreModels
import CivilCalendar
import Foundation
import Testing

/// The one owner of timestamps as text: what it writes, what it reads, and what it refuses.
@Suite struct TimestampTests {
    static func micros(_ seconds: Int64, _ fraction: Int64 = 0) -> Int64 { seconds * 1_000_000 + fraction }

    /// Written by hand from the calendar: 2026-11-02 is day 20,759 since 1970-01-01.
    static let written: [(micros: Int64, precision: Timestamp.Precision, text: String)] = [
        (0, .milliseconds, "1970-01-01T00:00:00.000Z"),
        (micros(20_759 * 86_400 + 36_000, 123_456), .milliseconds, "2026-11-02T10:00:00.123Z"),
        (micros(20_759 * 86_400 + 36_000, 123_456), .microseconds, "2026-11-02T10:00:00.123456Z"),
        (micros(20_759 * 86_400 + 36_000, 999_600), .milliseconds, "2026-11-02T10:00:01.000Z"),  // rounded, not cut
        (-1, .microseconds, "1969-12-31T23:59:59.999999Z"),  // floor division before 1970
        (micros(-62_135_596_800), .microseconds, "0001-01-01T00:00:00.000000Z"),
        (micros(253_402_300_799, 999_999), .microseconds, "9999-12-31T23:59:59.999999Z"),
        (micros(253_402_300_800), .microseconds, "10000-01-01T00:00:00.000000Z"),
        (micros(-62_135_596_800 - 86_400), .microseconds, "0001-12-31 00:00:00.000000+00 BC"),  // as PostgreSQL reads BC
    ]

    @Test(arguments: written.indices)
    func writes(_ index: Int) {
        let (micros, precision, text) = Self.written[index]
        #expect(Timestamp.format(microseconds: micros, precision) == text)
    }

    static let read: [(text: String, leniency: Timestamp.Leniency, micros: Int64?)] = [
        ("2026-11-02T10:00:00Z", [], micros(20_759 * 86_400 + 36_000)),
        ("2026-11-02T10:00:00.5Z", [], micros(20_759 * 86_400 + 36_000, 500_000)),
        ("2026-11-02T10:00:00.123456789Z", [], micros(20_759 * 86_400 + 36_000, 123_456)),
        ("2026-11-02T11:00:00+01:00", [], micros(20_759 * 86_400 + 36_000)),
        ("2026-11-02T11:00:00+0100", [], micros(20_759 * 86_400 + 36_000)),
        ("2026-11-02T04:30:00-05:30", [], micros(20_759 * 86_400 + 36_000)),
        ("2026-11-02 10:00:00.123456+00", [.spaceSeparator], micros(20_759 * 86_400 + 36_000, 123_456)),  // PostgreSQL
        ("2026-11-02 10:00:00", [.spaceSeparator, .missingZoneIsUTC], micros(20_759 * 86_400 + 36_000)),  // Apple's display
        ("2026-11-02 10:00:00Z", [], nil),
        ("2026-11-02T10:00:00", [], nil),
        ("2026-11-02", [], nil),
        ("2026-13-02T10:00:00Z", [], nil),
        ("2026-11-02T24:00:00Z", [], nil),
        ("2026-11-02T10:00:00.Z", [], nil),
        ("2026-11-02T10:00:00Zjunk", [], nil),
        ("infinity", [.spaceSeparator], nil),
        ("0001-12-31 00:00:00+00 BC", [.spaceSeparator], nil),
        ("", [], nil),
    ]

    @Test(arguments: read.indices)
    func reads(_ index: Int) {
        let (text, leniency, micros) = Self.read[index]
        #expect(Timestamp.parseMicroseconds(text[...], leniency) == micros, "\(text)")
    }

    /// What is written is read back exactly, at both precisions.
    @Test func roundTrips() {
        for micros in [Int64(0), -1, 1_700_000_000_123_456, -2_000_000_000_000_001, 253_402_300_799_998_999] {
            #expect(Timestamp.parseMicroseconds(Timestamp.format(microseconds: micros, .microseconds)[...]) == micros)
            let milliseconds = Timestamp.floorDivision(micros + 500, 1_000).quotient * 1_000
            #expect(Timestamp.parseMicroseconds(Timestamp.format(microseconds: micros, .milliseconds)[...]) == milliseconds)
        }
    }

    /// Issue 32: no date, however it was made, traps on its way to an integer or to text.
    @Test(arguments: [Double.nan, .infinity, -.infinity, 1e300, -1e300, 9e18, -9.3e18, 0, 1.5])
    func aConversionToAnIntegerSaturates(value: Double) {
        let converted = Timestamp.saturating(value)
        #expect(abs(converted) <= Timestamp.saturationLimit)
        #expect(converted == (value.isNaN ? 0 : value.isInfinite || abs(value) > 4.7e18 ? (value > 0 ? 1 << 62 : -(1 << 62)) : Int64(value.rounded())))
        // Formatting the extreme dates ends, with some text, never a trap.
        #expect(!Timestamp.format(Date(timeIntervalSince1970: value.isNaN ? 0 : value)).isEmpty)
    }

    @Test func theExtremeIntegersFormatWithoutATrap() {
        for micros in [Int64.max, Int64.min, Int64.max - 499, Int64.min + 1] {
            #expect(!Timestamp.format(microseconds: micros, .milliseconds).isEmpty)
            #expect(!Timestamp.format(microseconds: micros, .microseconds).isEmpty)
        }
        #expect(Date(timeIntervalSince1970: 1e300).milliseconds == 1 << 62)
    }
}

