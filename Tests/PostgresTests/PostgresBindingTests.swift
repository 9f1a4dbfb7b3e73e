import Foundation
import Postgres
import Testing
import TestSupport

/// Values bound as parameters come back unchanged, through a real server.
@Suite struct PostgresBindingTests {
    static let hostileStrings = [
        "empty": "", "plain": "plain", "quotes": "it's a \"quote\"", "backslash": "back\\slash",
        "control characters": "tab\there\nnewline\r\n", "unicode": "naïve café 日本語 🧾",
        "injection": "'; DROP TABLE iap.app_receipts; --", "placeholder": "$1", "word NULL": "NULL",
        "COPY null marker": "\\N", "1 MB": String(repeating: "x", count: 1 << 20),
    ]

    @Test(arguments: hostileStrings.keys.sorted())
    func textRoundTrips(_ label: String) async throws {
        let value = try #require(Self.hostileStrings[label])
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let rows = try await connection.query("SELECT \(value) AS value, length(\(value)) AS length")
        #expect(try rows[0].decode("value", as: String.self) == value)
        #expect(try rows[0].decode("length", as: Int.self) == value.unicodeScalars.count)
    }

    @Test func everyTypeRoundTrips() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let date = Date(timeIntervalSince1970: 1_606_293_002.123)
        let interval = PostgresInterval(months: 1, days: 2, microseconds: 3_600_000_500)
        let json = PostgresJSON(text: #"{"a": [1, "two", null], "b": {"c": true}}"#)
        let decimal = Decimal(string: "12345678901234567890.0123456789")!
        let rows = try await connection.query("""
            SELECT \(Int64.max) AS big, \(Int32.min) AS small, \(42) AS int, \(true) AS yes, \(false) AS no,
                   \(2.5) AS double, \(decimal) AS decimal, \(date) AS date, \(interval) AS interval,
                   \(json) AS json, \(Data([0, 1, 254, 255])) AS bytes,
                   \(["a", "b\"c", "d\\e"]) AS list
            """)
        let row = rows[0]
        #expect(try row.decode("big", as: Int64.self) == .max)
        #expect(try row.decode("small", as: Int32.self) == .min)
        #expect(try row.decode("int", as: Int.self) == 42)
        #expect(try row.decode("yes", as: Bool.self) == true)
        #expect(try row.decode("no", as: Bool.self) == false)
        #expect(try row.decode("double", as: Double.self) == 2.5)
        #expect(try row.decode("decimal", as: Decimal.self) == decimal)
        #expect(try row.decode("date", as: Date.self) == date)
        #expect(try row.decode("interval", as: PostgresInterval.self) == interval)
        #expect(try row.decode("json", as: PostgresJSON.self).decoded(as: JSONValue.self)
            == PostgresJSON(text: json.text).decoded(as: JSONValue.self))
        #expect(try row.decode("bytes", as: Data.self) == Data([0, 1, 254, 255]))
        #expect(try row.decode("list", as: String.self) == #"{a,"b\"c","d\\e"}"#)
    }

    @Test func nullsBindAndDecodeAsNil() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let missingText: String? = nil
        let missingDate: Date? = nil
        let rows = try await connection.query("SELECT \(missingText)::text AS text, \(missingDate) AS date, NULL::bigint AS number")
        #expect(try rows[0].decode("text", as: String?.self) == nil)
        #expect(try rows[0].decode("date", as: Date?.self) == nil)
        #expect(try rows[0].decode("number", as: Int?.self) == nil)
        #expect(throws: PostgresError.self) { try rows[0].decode("number", as: Int.self) }
    }

    @Test func intervalsDecodeFromTheirSQLForms() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let rows = try await connection.query("""
            SELECT '1 mon'::interval AS month, '1 year 2 mons 3 days 04:05:06.5'::interval AS mixed,
                   '0'::interval AS zero, '-7 days -1 hour'::interval AS negative
            """)
        #expect(try rows[0].decode("month", as: PostgresInterval.self) == PostgresInterval(months: 1))
        #expect(try rows[0].decode("mixed", as: PostgresInterval.self)
            == PostgresInterval(months: 14, days: 3, microseconds: 14_706_500_000))
        #expect(try rows[0].decode("zero", as: PostgresInterval.self) == PostgresInterval())
        #expect(try rows[0].decode("negative", as: PostgresInterval.self)
            == PostgresInterval(days: -7, microseconds: -3_600_000_000))
    }

    @Test(arguments: [-62_135_596_800.0, -1_000_000_000.25, -0.5, 0, 951_782_400, 4_102_444_800.000001])
    func datesRoundTripAcrossEras(_ seconds: Double) async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let date = Date(timeIntervalSince1970: seconds)
        let rows = try await connection.query("SELECT \(date) AS date")
        #expect(try rows[0].decode("date", as: Date.self) == date)
    }

    @Test func batchArraysRoundTripEveryElement() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let strings: [String?] = Self.hostileStrings.values.sorted().filter { $0.count < 100 } + [nil, "{a,b}", "\\\""]
        let dates: [Date?] = [Date(timeIntervalSince1970: 1_606_293_002.123456), nil, Date.distantFuture,
                              Date(timeIntervalSince1970: -0.5), Date(timeIntervalSince1970: 0)]
        let texts = try await connection.query("SELECT t FROM unnest(\(PostgresTextArray(strings))::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n")
        #expect(try texts.map { try $0.decode("t", as: String?.self) } == strings)
        let times = try await connection.query("SELECT t FROM unnest(\(PostgresTextArray(dates))::timestamptz[]) WITH ORDINALITY AS u(t, n) ORDER BY n")
        #expect(try times.map { try $0.decode("t", as: Date?.self) } == dates)
    }

    /// The binary form of every element type, through the casts the writer's statements use.
    @Test func binaryArraysRoundTripEveryElement() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let strings: [String?] = Self.hostileStrings.values.sorted() + [nil, "{a,b}", "\\\"", "NULL"]
        let texts = try await connection.query("SELECT t FROM unnest(\(PostgresArray(strings))::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n")
        #expect(try texts.map { try $0.decode("t", as: String?.self) } == strings)

        let dates: [Date?] = [Date(timeIntervalSince1970: 1_606_293_002.123456), nil, Date.distantFuture,
                              Date(timeIntervalSince1970: -0.5), Date(timeIntervalSince1970: 0),
                              Date(timeIntervalSince1970: 946_684_800), Date(timeIntervalSince1970: 946_684_799.999999)]
        let times = try await connection.query("SELECT t FROM unnest(\(PostgresArray(dates))::timestamptz[]) WITH ORDINALITY AS u(t, n) ORDER BY n")
        #expect(try times.map { try $0.decode("t", as: Date?.self) } == dates)
        // Before year one too (which the text form writes as BC): the same instants as the text form's.
        let eras = dates + [Date.distantPast, Date(timeIntervalSince1970: -62_135_596_800)]
        let agree = try await connection.query("""
            SELECT bool_and(b IS NOT DISTINCT FROM t) AS same, count(*) AS n
            FROM unnest(\(PostgresArray(eras))::timestamptz[], \(PostgresTextArray(eras))::timestamptz[]) AS u(b, t)
            """)
        #expect(try agree[0].decode("same", as: Bool.self))
        #expect(try agree[0].decode("n", as: Int.self) == eras.count)
        // The server reads the instant, not just something that decodes back: the epoch is 2000-01-01 UTC.
        let epoch = try await connection.query("SELECT (\(PostgresArray([Date(timeIntervalSince1970: 946_684_800)]))::timestamptz[])[1] = '2000-01-01 00:00:00+00' AS same")
        #expect(try epoch[0].decode("same", as: Bool.self))

        let big: [Int64?] = [.min, -1, 0, nil, 1, .max]
        let small: [Int32?] = [.min, nil, 0, .max]
        let ints: [Int?] = [42, nil, -7]
        let flags: [Bool?] = [true, nil, false]
        let rows = try await connection.query("""
            SELECT array_to_string(\(PostgresArray(big))::bigint[], ',', 'null') AS big,
                   array_to_string(\(PostgresArray(small))::integer[], ',', 'null') AS small,
                   array_to_string(\(PostgresArray(ints))::integer[], ',', 'null') AS ints,
                   array_to_string(\(PostgresArray(flags))::boolean[], ',', 'null') AS flags,
                   cardinality(\(PostgresArray([String]()))::text[]) AS empty
            """)
        #expect(try rows[0].decode("big", as: String.self) == "-9223372036854775808,-1,0,null,1,9223372036854775807")
        #expect(try rows[0].decode("small", as: String.self) == "-2147483648,null,0,2147483647")
        #expect(try rows[0].decode("ints", as: String.self) == "42,null,-7")
        #expect(try rows[0].decode("flags", as: String.self) == "t,null,f")
        #expect(try rows[0].decode("empty", as: Int.self) == 0)
    }

    /// A value the cast cannot hold is the server's clear error, not a wrong number.
    @Test func binaryArrayOutOfRangeForItsCastIsRefused() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        await #expect(throws: PostgresError.self) {
            _ = try await connection.query("SELECT \(PostgresArray([Int(Int32.max) + 1]))::integer[] AS narrowed")
        }
    }

    @Test func datesBeforeYearOneAreWrittenAsBC() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let rows = try await connection.query("SELECT extract(year FROM \(Date.distantPast))::int AS year")
        #expect(try rows[0].decode("year", as: Int.self) == -1)  // 1 BC
    }

    @Test func timestampsKeepMicrosecondsAndAreUTC() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let rows = try await connection.query("""
            SELECT '2026-11-22 07:12:00.123456+05:30'::timestamptz AS offset_time,
                   '1969-12-31 23:59:59.5Z'::timestamptz AS before_epoch
            """)
        let offset = try rows[0].decode("offset_time", as: Date.self)
        #expect(offset.timeIntervalSince1970 == 1_795_311_720.123456)  // 01:42:00.123456 UTC
        #expect(try rows[0].decode("before_epoch", as: Date.self).timeIntervalSince1970 == -0.5)
    }
}

/// Any JSON, compared by value rather than by text (jsonb reorders keys).
enum JSONValue: Decodable, Equatable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }
}

/// JSON stored by the job (a run's summary and options) keeps times to the millisecond, as every
/// other output does, and still reads the whole seconds stored before it did (issue 45).
@Suite struct StoredJSONTimeTests {
    struct Stamped: Codable, Equatable {
        var at: Date
    }

    @Test func timesAreStoredToTheMillisecondAndOldSecondsStillRead() throws {
        let at = Date(timeIntervalSince1970: 1_795_680_051.196)
        let json = try PostgresJSON(encoding: Stamped(at: at))
        #expect(json.text == #"{"at":"2026-11-26T08:00:51.196Z"}"#)
        #expect(try json.decoded(as: Stamped.self) == Stamped(at: at))
        let old = PostgresJSON(text: #"{"at":"2026-11-26T08:00:51Z"}"#)
        #expect(try old.decoded(as: Stamped.self) == Stamped(at: Date(timeIntervalSince1970: 1_795_680_051)))
        #expect(throws: DecodingError.self) { try PostgresJSON(text: #"{"at":"yesterday"}"#).decoded(as: Stamped.self) }
    }
}
