import Foundation
import Postgres
import Testing
import TestSupport

/// The one place a name is spliced into SQL text, tried with hostile names through the public API
/// (issue 33: behaviour, where a grep of the sources could not see `copy` splice identifiers).
@Suite struct SpliceTests {
    static let hostileTables = [
        "t; DROP TABLE victim", "t (a) FROM STDIN; DROP TABLE victim; COPY t", "\"t\"", "T", "public.t.x", "t--", "",
        "t\u{0}", "tä", "t ", " t", "1t", String(repeating: "t", count: 64),
    ]
    static let hostileColumns = [
        "a) FROM STDIN; DROP TABLE victim; --", "a, b", "\"a\"", "A", "x.a", "", "a\nb", "a'", "$1",
    ]

    static func world() async throws -> (TestDatabase, PostgresConnection) {
        let database = try await TestDatabase.create("splice")
        let connection = try await database.connect()
        try await connection.execute("CREATE TABLE t (a text, b text)")
        try await connection.execute("CREATE TABLE victim (v int)")
        return (database, connection)
    }

    @Test func aHostileTableOrColumnNameIsRefusedBeforeAnythingIsSent() async throws {
        let (database, connection) = try await Self.world()
        defer { Task { await connection.close(); try? await database.drop() } }
        let row = [PostgresBind("1"), PostgresBind("2")]
        for table in Self.hostileTables {
            do {
                try await connection.copy(into: table, columns: ["a", "b"], rows: [row])
                Issue.record("\(table.debugDescription) was accepted")
            } catch {
                #expect(error.code == .badIdentifier, "\(table.debugDescription): \(error)")
            }
        }
        for column in Self.hostileColumns {
            do {
                try await connection.copy(into: "t", columns: ["a", column], rows: [row])
                Issue.record("\(column.debugDescription) was accepted")
            } catch {
                #expect(error.code == .badIdentifier, "\(column.debugDescription): \(error)")
            }
        }
        do {
            try await connection.copy(into: "t", columns: [], rows: [])
            Issue.record("no column was accepted")
        } catch {
            #expect(error.code == .badIdentifier)
        }
        // Nothing reached the server: the victim stands, nothing was copied, and the connection is fine.
        #expect(try await connection.query("SELECT count(*) AS n FROM victim")[0].decode("n", as: Int.self) == 0)
        #expect(try await connection.query("SELECT count(*) AS n FROM t")[0].decode("n", as: Int.self) == 0)
        // The names the program uses pass, schema-qualified included.
        #expect(try await connection.copy(into: "public.t", columns: ["a", "b"], rows: [row, row]) == 2)
        #expect(try await connection.copy(into: "t", columns: ["b"], rows: [[PostgresBind("x")]]) == 1)
    }
}
