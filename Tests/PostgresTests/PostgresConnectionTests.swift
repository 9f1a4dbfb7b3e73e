import Foundation
import Logging
@_spi(Testing) import Postgres
import Testing
import TestSupport

@Suite struct PostgresConnectionTests {
    /// A lost host frees its locks within minutes (docs/operating.md, "Lost hosts and held locks"):
    /// the server probes a silent client after a minute and gives it up after six unanswered probes
    /// or two minutes of unacknowledged data, instead of the kernel's two hours; an operator's own
    /// `options=-c ...` keeps its value.
    @Test func everyConnectionKeepsItsPeerAliveOrLetsItGoWithinMinutes() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let shown = try await connection.query("""
            SELECT current_setting('tcp_keepalives_idle') AS idle, current_setting('tcp_keepalives_interval') AS interval,
                   current_setting('tcp_keepalives_count') AS count, current_setting('tcp_user_timeout') AS user_timeout
            """)[0]
        #expect(try shown.decode("idle", as: String.self) == "60" && shown.decode("interval", as: String.self) == "10")
        #expect(try shown.decode("count", as: String.self) == "6" && shown.decode("user_timeout", as: String.self) == "120000")
        await connection.close()
        let own = try await PostgresConnection.connect(TestDatabase.adminConnectionString + " options='-c tcp_keepalives_idle=30'")
        #expect(try await own.query("SELECT current_setting('tcp_keepalives_idle') AS idle")[0].decode("idle", as: String.self) == "30")
        await own.close()
    }

    @Test func decodingErrorsNameTheColumnAndNotTheValue() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let rows = try await connection.query("SELECT 'private-value'::text AS account_id, 1.5::numeric AS price")
        do {
            _ = try rows[0].decode("account_id", as: Int.self)
            Issue.record("decoding text as Int should fail")
        } catch {
            #expect(error.column == "account_id")
            #expect(error.description.contains("\"account_id\""))
            #expect(error.description.contains("text"))
            #expect(!error.description.contains("private-value"))
        }
        #expect(throws: PostgresError.self) { try rows[0].decode("price", as: Bool.self) }
        #expect(throws: PostgresError.self) { try rows[0].decode("no_such_column", as: String.self) }
    }

    /// NOTIFY as a listener sees it: nothing before the sender commits, nothing of a rolled-back
    /// transaction, each payload once, in commit order.
    @Test func aListenerReceivesCommittedNotificationsOnceInCommitOrder() async throws {
        let channel = "rr_test_\(UInt32.random(in: 0...UInt32.max))"
        let listener = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let sender = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        try await listener.execute("LISTEN \(unescaped: channel)")
        try await sender.execute("BEGIN")
        try await sender.execute("SELECT pg_notify(\(channel), 'first')")
        _ = try await listener.query("SELECT 1")
        #expect(try await listener.notifications().isEmpty)  // not committed yet
        try await sender.execute("COMMIT")
        try await sender.withTransaction { tx in try await tx.execute("SELECT pg_notify(\(channel), 'second')") }
        do {
            try await sender.withTransaction { tx in
                try await tx.execute("SELECT pg_notify(\(channel), 'rolled back')")
                throw CancellationError()
            }
        } catch is CancellationError {}
        _ = try await listener.query("SELECT 1")
        #expect(try await listener.notifications() == [
            PostgresNotification(channel: channel, payload: "first"), PostgresNotification(channel: channel, payload: "second"),
        ])
        _ = try await listener.query("SELECT 1")
        #expect(try await listener.notifications().isEmpty)
        await listener.close()
        await sender.close()
    }

    @Test func serverErrorsCarrySQLStateButNoBindValues() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let secret = "s3cr3t-bind-value"
        do {
            try await connection.execute("SELECT \(secret)::integer")
            Issue.record("casting text to integer should fail")
        } catch {
            #expect(error.sqlState == "22P02")
            #expect(error.code == .server)
            #expect(error.description.contains("22P02"))
            #expect(!error.description.contains(secret))
        }
    }

    @Test func failedConnectionSaysWhereAndLeaksNothing() async throws {
        let port = freeLoopbackPort()
        let user = "leakcheck\(UInt32.random(in: 0...UInt32.max))"
        let connectionString = "host=127.0.0.1 port=\(port) user=\(user) password=hunter2-secret dbname=ledger connect_timeout=2"
        let target = PostgresConnection.describe(connectionString)
        #expect(target == "127.0.0.1:\(port)/ledger as \(user)")
        for _ in 0..<20 {
            do {
                _ = try await PostgresConnection.connect(connectionString)
                Issue.record("connecting to a closed port should fail")
            } catch {
                #expect(error.code == .connectionFailed)
                #expect(error.description.contains(target))
                #expect(!error.description.contains("hunter2-secret"))
            }
        }
        // Every PGconn that libpq allocated for the failed attempts was freed.
        #expect(LiveConnections.count(target: target) == 0)
    }

    @Test func closingAndDroppingAConnectionFreesIt() async throws {
        let database = try await TestDatabase.create("freecheck")
        let target = PostgresConnection.describe(database.connectionString)
        var connection: PostgresConnection? = try await database.connect()
        _ = try await connection?.query("SELECT 1")
        #expect(LiveConnections.count(target: target) == 1)
        await connection?.close()
        #expect(LiveConnections.count(target: target) == 0)
        // Dropped without close(): deinit frees it on the connection's thread.
        connection = try await database.connect()
        #expect(LiveConnections.count(target: target) == 1)
        connection = nil
        try await waitUntil("the dropped connection is freed", timeout: .seconds(30)) { LiveConnections.count(target: target) == 0 }
        try await database.drop()
    }

    @Test func targetDescriptionHidesPasswordInURIs() {
        let connection = "postgresql://bob:pa%24%24word@db.example:6543/billing?sslmode=disable"
        #expect(PostgresConnection.describe(connection) == "db.example:6543/billing as bob")
    }

    @Test func transactionRollsBackWhenTheBodyThrows() async throws {
        let database = try await TestDatabase.create("rollback")
        let connection = try await database.connect()
        try await connection.execute("CREATE TABLE ledger (id bigint PRIMARY KEY)")
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await connection.withTransaction { connection in
                try await connection.execute("INSERT INTO ledger VALUES (1)")
                throw Abort()
            }
        }
        await #expect(throws: PostgresError.self) {
            try await connection.withTransaction { connection in
                try await connection.execute("INSERT INTO ledger VALUES (2)")
                try await connection.execute("INSERT INTO ledger VALUES (2)")  // unique violation
            }
        }
        try await connection.withTransaction { connection in
            try await connection.execute("INSERT INTO ledger VALUES (3)")
        }
        let rows = try await connection.query("SELECT id FROM ledger ORDER BY id")
        #expect(try rows.map { try $0.decode("id", as: Int.self) } == [3])
        await connection.close()
        try await database.drop()
    }

    /// A ROLLBACK that fails (here: the server ended the session while the body was failing) is
    /// logged, since the caller hears only of the body's error, and the connection is discarded:
    /// the next statement runs on a new session, not inside the old transaction.
    @Test func aFailedRollbackIsLoggedAndTheConnectionDiscarded() async throws {
        let log = LogRecorder()
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString, logger: log.logger)
        let admin = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let firstPID = try await connection.backendProcessID()
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await connection.withTransaction { connection in
                try await connection.execute("CREATE TEMPORARY TABLE doomed (id int)")
                try await admin.execute("SELECT pg_terminate_backend(\(firstPID))")
                throw Abort()
            }
        }
        let warnings = log.messages.filter { $0.level == .warning }
        #expect(warnings.count == 1)
        #expect(warnings.first?.message == "postgres.rollback_failed")
        #expect(warnings.first?.metadata.contains("postgres.database=") == true)
        let rows = try await connection.query("SELECT to_regclass('pg_temp.doomed') IS NULL AS gone")
        #expect(try rows[0].decode("gone", as: Bool.self))
        #expect(try await connection.backendProcessID() != firstPID)
        try await connection.withTransaction { connection in try await connection.execute("SELECT 1") }
        #expect(log.messages.filter { $0.level == .warning }.count == 1)
        await connection.close()
        await admin.close()
    }

    @Test func reconnectsAfterTheServerDropsTheSession() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let admin = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let firstPID = try await connection.backendProcessID()
        try await admin.execute("SELECT pg_terminate_backend(\(firstPID))")
        // The statement that meets the dead socket fails; the next one reconnects.
        _ = try? await connection.query("SELECT 1")
        let rows = try await connection.query("SELECT 2 AS two")
        #expect(try rows[0].decode("two", as: Int.self) == 2)
        #expect(try await connection.backendProcessID() != firstPID)
    }

    /// A reset with no goodbye from the server (a crash, a dropped network, a restart that cuts a
    /// statement): libpq can report it with its status still OK, and it must still read as a lost
    /// connection, which the run retries, never as a server error, which it does not.
    @Test func aResetConnectionIsLostNotAServerErrorAndTheNextStatementReconnects() async throws {
        let admin = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let address = try TestDatabase.adminConnectionString
        let host = address.firstMatch(of: /host=(\S+)/).map { String($0.1) } ?? "127.0.0.1"
        let port = address.firstMatch(of: /port=(\d+)/).map { Int($0.1)! } ?? 5432
        let relay = try TCPCutter(toHost: host, port: port)
        let relayed = address.replacing(/host=\S+/, with: "host=127.0.0.1").replacing(/port=\d+/, with: "port=\(relay.port)")
        let connection = try await PostgresConnection.connect(relayed)

        // Cut while a statement runs.
        let pid = try await connection.backendProcessID()
        let sleeping = Task { try await connection.query("SELECT pg_sleep(30)") }
        try await waitUntil("the statement is running") {
            try await admin.query("SELECT count(*) AS n FROM pg_stat_activity WHERE pid = \(pid) AND state = 'active'")[0]
                .decode("n", as: Int.self) == 1
        }
        try relay.cut()
        switch await sleeping.result {
        case .success: Issue.record("a statement on a reset connection succeeded")
        case .failure(let error as PostgresError):
            #expect(error.code == .connectionLost, "\(error)")
            #expect(error.isConnectionError)
        case .failure(let error): Issue.record("\(error)")
        }
        #expect(try await connection.query("SELECT 2 AS two")[0].decode("two", as: Int.self) == 2)

        // Cut while idle: the next statement meets the dead socket, the one after reconnects.
        try relay.cut()
        do {
            _ = try await connection.query("SELECT 3")
            Issue.record("a statement on a reset connection succeeded")
        } catch {
            #expect(error.code == .connectionLost, "\(error)")
        }
        #expect(try await connection.query("SELECT 4 AS four")[0].decode("four", as: Int.self) == 4)
        _ = try? await admin.execute("SELECT pg_terminate_backend(\(pid))")
        await connection.close()
        await admin.close()
        relay.stop()
    }

    @Test func aLostConnectionInsideATransactionFailsTheTransaction() async throws {
        let database = try await TestDatabase.create("lostintx")
        let connection = try await database.connect()
        let admin = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        try await connection.execute("CREATE TABLE ledger (id bigint PRIMARY KEY)")
        let pid = try await connection.backendProcessID()
        await #expect(throws: PostgresError.self) {
            try await connection.withTransaction { connection in
                try await connection.execute("INSERT INTO ledger VALUES (1)")
                try await admin.execute("SELECT pg_terminate_backend(\(pid))")
                try await connection.execute("INSERT INTO ledger VALUES (2)")
                try await connection.execute("INSERT INTO ledger VALUES (3)")
            }
        }
        let rows = try await connection.query("SELECT count(*) AS n FROM ledger")
        #expect(try rows[0].decode("n", as: Int.self) == 0)
        await connection.close()
        try await database.drop()
    }

    @Test func copyLoadsRowsWithEveryAwkwardCharacter() async throws {
        let database = try await TestDatabase.create("copy")
        let connection = try await database.connect()
        try await connection.execute("CREATE TABLE t (id bigint, note text, at timestamptz)")
        let notes = ["tab\tand\nnewline", "back\\slash", "\\N", "plain", "日本"]
        let rows: [[PostgresBind]] = (0..<10_000).map { index in
            [PostgresBind(index), index % 7 == 0 ? .null : PostgresBind(notes[index % notes.count]),
             PostgresBind(Date(timeIntervalSince1970: Double(index)))]
        }
        #expect(try await connection.copy(into: "t", columns: ["id", "note", "at"], rows: rows) == 10_000)
        let back = try await connection.query("SELECT id, note, at FROM t WHERE id IN (1, 2, 3, 7, 9999) ORDER BY id")
        #expect(try back.map { try $0.decode("note", as: String?.self) }
            == ["back\\slash", "\\N", "plain", nil, "日本"])
        #expect(try back[4].decode("at", as: Date.self) == Date(timeIntervalSince1970: 9999))
        await #expect(throws: PostgresError.self) {
            try await connection.copy(into: "t", columns: ["id"], rows: [[PostgresBind("not a number")]])
        }
        // The connection is still usable after a failed COPY.
        #expect(try await connection.query("SELECT count(*) AS n FROM t")[0].decode("n", as: Int.self) == 10_000)
        await connection.close()
        try await database.drop()
    }

    @Test(.disabled(if: isSanitizedRun, "memory: the sanitizer's shadow memory and allocator inflate resident size"))
    func cursorStreams200kRowsInFlatMemory() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let payload = String(repeating: "r", count: 1_000)
        var count = 0
        var sum = 0
        var residentAfterWarmUp = 0
        try await connection.withCursor(
            "SELECT n, \(payload) || n::text AS payload FROM generate_series(1, 200000) AS n", fetchSize: 2_000
        ) { cursor in
            for try await batch in cursor {
                for row in batch {
                    count += 1
                    sum += try row.decode("n", as: Int.self)
                    _ = try row.decode("payload", as: String.self)
                }
                if count == 20_000 { residentAfterWarmUp = residentBytes() }
            }
        }
        #expect(count == 200_000)
        #expect(sum == 200_000 * 200_001 / 2)
        // Holding the rows would take over 200 MB; streaming keeps a couple of batches.
        let growth = residentBytes() - residentAfterWarmUp
        #expect(growth < 48 << 20, "resident memory grew by \(growth >> 20) MB while streaming")
    }
}

func openFileDescriptors() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
}

func residentBytes() -> Int {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let pages = statm.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}
