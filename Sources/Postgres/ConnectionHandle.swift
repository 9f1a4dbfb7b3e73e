import CLibPQ
import Foundation
import Locking

/// Owns the `PGconn`: created, reset and freed (exactly once) here, on the connection's thread.
///
/// `@unchecked Sendable`: it is only ever touched from the connection's `BlockingThread`, whose
/// jobs run one after another; the only other access is `close()` queued there from `deinit`.
final class ConnectionHandle: @unchecked Sendable {
    private var connection: OpaquePointer?
    private let connectionString: String
    private let applicationName: String
    private let target: String
    private let canceller: StatementCanceller
    private var isClosed = false
    /// Set between BEGIN and COMMIT/ROLLBACK: a lost connection must not silently reconnect mid-transaction.
    private(set) var isInTransaction = false

    init(connectionString: String, applicationName: String, target: String, canceller: StatementCanceller) {
        self.connectionString = connectionString
        self.applicationName = applicationName
        self.target = target
        self.canceller = canceller
    }

    deinit {
        if let connection { finish(connection) }
    }

    func connect() throws(PostgresError) {
        discard()
        // Defaults first: the caller's connection string, expanded from `dbname`, overrides them.
        // TCP keepalives (docs/operating.md, "Lost hosts and held locks"): this side learns within
        // two minutes that the server's host is gone, instead of waiting on a dead socket for hours.
        let keywords = ["connect_timeout", "application_name", "client_encoding"] + Self.keepalives.map(\.0) + ["dbname"]
        let values = ["10", applicationName, "UTF8"] + Self.keepalives.map(\.1) + [connectionString]
        let connection = withCStringArray(keywords) { keywordPointers in
            withCStringArray(values) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let connection else {
            throw PostgresError(code: .connectionFailed, phase: .connect, message: "libpq could not allocate a connection")
        }
        LiveConnections.opened(target)
        guard PQstatus(connection) == CONNECTION_OK else {
            let reason = ConnectionFailure.reason(libpqMessage: String(cString: PQerrorMessage(connection)))
            finish(connection)
            throw PostgresError(code: .connectionFailed, phase: .connect, message: "could not connect to \(target): \(reason)")
        }
        self.connection = connection
        do {
            try setUp(connection)
        } catch {
            // Half set up (its time zone, its interval style unset) is not fit for a statement.
            discard()
            throw error
        }
        // Cancellable only now: a cancel cannot land on the setting up.
        canceller.connected(connection)
    }

    /// The session's settings, on a connection just made.
    private func setUp(_ connection: OpaquePointer) throws(PostgresError) {
        // Server notices ("schema already exists, skipping") are not errors; libpq would print them to stderr.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        // One clock and one text format for every value this code reads and writes.
        try executeScript("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'iso_8601'")
        // No JIT: this code's statements touch a batch's rows by key, and a table that grew since
        // its statistics (a first night) inflates their estimates past JIT's threshold: a lookup
        // of 460 keys was compiled for 460 ms to run for 10 (BENCHMARKS.md, "The finance journal
        // on every path, second pass").
        try executeScript("SELECT set_config('jit', 'off', false) FROM pg_settings WHERE name = 'jit'")
        // And the server's side: a backend whose client host vanished (a node lost with the run
        // lock) ends within about two minutes, and its locks with it, instead of after the
        // kernel's two hours. Only where nobody set them (`options=-c ...`); a Unix socket ignores them.
        try executeScript("""
            SELECT set_config(name, value, false) FROM (VALUES ('tcp_keepalives_idle', '60'), ('tcp_keepalives_interval', '10'),
                ('tcp_keepalives_count', '6'), ('tcp_user_timeout', '120000')) AS wanted (name, value)
            WHERE EXISTS (SELECT 1 FROM pg_settings s WHERE s.name = wanted.name AND s.source = 'default')
            """)
    }

    /// libpq's keepalives: the first probe after 60 s of silence, then every 10 s, the connection
    /// given up after 6 unanswered or 2 minutes of unacknowledged data.
    static let keepalives = [("keepalives", "1"), ("keepalives_idle", "60"), ("keepalives_interval", "10"), ("keepalives_count", "6"),
                             ("tcp_user_timeout", "120000")]

    func close() {
        isClosed = true
        discard()
    }

    /// Frees the live `PGconn`, if any, and forgets it: the next statement connects afresh (unless
    /// the handle was closed).
    private func discard() {
        if let connection {
            finish(connection)
            self.connection = nil
        }
    }

    /// The only place a `PGconn` is freed.
    private func finish(_ connection: OpaquePointer) {
        if connection == self.connection { canceller.disconnected() }
        PQfinish(connection)
        LiveConnections.finished(target)
    }

    func backendProcessID() throws(PostgresError) -> Int32 {
        PQbackendPID(try usableConnection())
    }

    /// Reads what the server sent since the last statement, then takes every notification out.
    func notifications() throws(PostgresError) -> [PostgresNotification] {
        let connection = try usableConnection()
        guard PQconsumeInput(connection) == 1 else { throw lostOrFailed(connection, phase: .execute) }
        var received: [PostgresNotification] = []
        while let notice = PQnotifies(connection) {
            received.append(PostgresNotification(channel: String(cString: notice.pointee.relname), payload: String(cString: notice.pointee.extra)))
            PQfreemem(notice)
        }
        return received
    }

    func execute(_ query: PostgresQuery) throws(PostgresError) -> StatementResult {
        try run(query.sql, binds: query.binds)
    }

    func begin(_ statement: String) throws(PostgresError) {
        _ = try run(statement, binds: [])
        isInTransaction = true
    }

    func commit() throws(PostgresError) {
        defer { isInTransaction = false }
        _ = try run("COMMIT", binds: [], phase: .transaction)
    }

    /// Ends a failed transaction. When the ROLLBACK itself fails, nobody knows what state the
    /// session is in (still inside the transaction?), so the connection is discarded: the next
    /// statement connects afresh rather than run inside a transaction that was meant to be gone.
    func rollback() throws(PostgresError) {
        defer { isInTransaction = false }
        guard let connection, PQstatus(connection) == CONNECTION_OK else { return }
        do {
            _ = try run("ROLLBACK", binds: [], phase: .transaction)
        } catch {
            discard()
            throw error
        }
    }

    /// The live `PGconn`, reconnecting first if the server dropped it outside a transaction.
    func usableConnection() throws(PostgresError) -> OpaquePointer {
        guard !isClosed else {
            throw PostgresError(code: .connectionClosed, message: "the connection was closed")
        }
        if let connection, PQstatus(connection) == CONNECTION_OK { return connection }
        if isInTransaction {
            throw PostgresError(
                code: .connectionLost, phase: .transaction,
                message: "the connection to \(target) was lost inside a transaction; the transaction was rolled back")
        }
        try connect()
        guard let connection else {
            throw PostgresError(code: .connectionLost, message: "the connection to \(target) is gone")
        }
        return connection
    }

    /// Executes one statement with its parameters (text or binary) and returns rows in text format.
    func run(_ sql: String, binds: [PostgresBind], phase: PostgresError.Phase = .execute) throws(PostgresError) -> StatementResult {
        let connection = try usableConnection()
        let types = binds.map { Oid($0.type.rawValue) }
        let result: OpaquePointer? = withParameters(binds) { values, lengths, formats in
            types.withUnsafeBufferPointer { types in
                PQexecParams(connection, sql, Int32(binds.count), types.baseAddress, values, lengths, formats, 0)
            }
        }
        return try consume(result, connection: connection, phase: phase)
    }

    /// A connection found lost is dropped here, so the next statement outside a transaction
    /// connects afresh instead of writing to a socket that libpq may still call OK.
    func dropIfLost(_ error: PostgresError) -> PostgresError {
        if error.code == .connectionLost { discard() }
        return error
    }

    /// Turns a `PGresult` into Swift values and frees it; reads libpq's error text right here.
    func consume(_ result: OpaquePointer?, connection: OpaquePointer, phase: PostgresError.Phase) throws(PostgresError) -> StatementResult {
        guard let result else {
            throw dropIfLost(lostOrFailed(connection, phase: phase))
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
            return StatementResult(rows: [], affectedRows: Int(String(cString: PQcmdTuples(result))) ?? 0)
        case PGRES_TUPLES_OK, PGRES_SINGLE_TUPLE:
            return StatementResult(rows: Self.rows(of: result), affectedRows: Int(PQntuples(result)))
        default:
            throw dropIfLost(Self.error(from: result, connection: connection, phase: phase))
        }
    }

    /// No result at all: libpq could not send the statement (or allocate its result).
    func lostOrFailed(_ connection: OpaquePointer, phase: PostgresError.Phase) -> PostgresError {
        PostgresError(code: .connectionLost, phase: phase, message: String(cString: PQerrorMessage(connection)))
    }

    /// Whether a failed statement means the connection is gone rather than that the server
    /// refused the statement. The server's errors always carry a SQLSTATE; an error without one is
    /// libpq's own, which after connecting means trouble on the socket. libpq can report it with
    /// its status still OK: PQgetResult returns a failed write ("server closed the connection
    /// unexpectedly") before it has read the EOF (a CI run saw it when the server restarted
    /// mid-run, and took it for a server error that must not be retried).
    static func isLost(_ connection: OpaquePointer, sqlState: String?) -> Bool {
        guard PQstatus(connection) == CONNECTION_OK, let sqlState else { return true }
        // 08: connection exception; 57P01-03: the server is shutting down or restarting.
        return sqlState.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(sqlState)
    }

    static func error(from result: OpaquePointer, connection: OpaquePointer, phase: PostgresError.Phase) -> PostgresError {
        func field(_ code: Character) -> String? {
            PQresultErrorField(result, Int32(code.asciiValue!)).map { String(cString: $0) }
        }
        let sqlState = field("C")
        let lost = isLost(connection, sqlState: sqlState)
        var message = field("M") ?? String(cString: PQresultErrorMessage(result))
        if sqlState?.hasPrefix("22") == true {
            // Data exceptions quote the offending input ("invalid input syntax for type integer: \"...\""),
            // which is a bound value: keep the server's words, drop the value.
            message = redactingQuotedText(message)
        }
        return PostgresError(
            code: lost ? .connectionLost : .server, phase: phase, sqlState: sqlState,
            message: message.isEmpty ? String(cString: PQerrorMessage(connection)) : message, detail: field("D"))
    }

    static func rows(of result: OpaquePointer) -> [PostgresRow] {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        let columns = PostgresColumns(
            names: (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) },
            types: (0..<columnCount).map { PostgresType(rawValue: UInt32(PQftype(result, Int32($0)))) })
        var rows: [PostgresRow] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<Int32(rowCount) {
            var values: [String?] = []
            values.reserveCapacity(columnCount)
            for column in 0..<Int32(columnCount) {
                if PQgetisnull(result, row, column) == 1 {
                    values.append(nil)
                } else {
                    let length = Int(PQgetlength(result, row, column))
                    let bytes = UnsafeRawBufferPointer(start: PQgetvalue(result, row, column), count: length)
                    values.append(String(decoding: bytes, as: UTF8.self))
                }
            }
            rows.append(PostgresRow(columns: columns, values: values))
        }
        return rows
    }
}

/// Calls `body` with a NULL-terminated array of C strings that lives for the call.
func withCStringArray<Result>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> Result) -> Result {
    withOptionalCStringArray(strings) { body($0!) }
}

/// PQexecParams' parallel arrays for `binds`: values (NULL pointers for SQL NULL), lengths
/// (read for binary values only) and formats (0 text, 1 binary). Values are copied into malloc'd
/// memory libpq may read until `body` returns.
func withParameters<Result>(
    _ binds: [PostgresBind],
    _ body: (UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> Result
) -> Result {
    var lengths = [Int32](repeating: 0, count: binds.count)
    var formats = [Int32](repeating: 0, count: binds.count)
    let copies: [UnsafeMutablePointer<CChar>?] = binds.indices.map { index in
        switch binds[index].value {
        case nil:
            return nil
        case .text(let text):
            return strdup(text)!
        case .binary(let bytes):
            lengths[index] = Int32(bytes.count)
            formats[index] = 1
            let copy = malloc(max(bytes.count, 1))!
            bytes.withUnsafeBytes { if let base = $0.baseAddress { memcpy(copy, base, $0.count) } }
            return copy.assumingMemoryBound(to: CChar.self)
        }
    }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { values in
        lengths.withUnsafeBufferPointer { lengths in
            formats.withUnsafeBufferPointer { formats in body(values.baseAddress, lengths.baseAddress, formats.baseAddress) }
        }
    }
}

/// Like `withCStringArray`, with nil entries kept as NULL pointers (SQL NULL parameters).
func withOptionalCStringArray<Result>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> Result) -> Result {
    let copies: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0)! } }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress) }
}

extension PostgresConnection {
    /// Runs a script of several statements through the simple query protocol, which cannot take
    /// parameters: only for SQL files shipped with the program (migrations), never for input.
    public func executeScript(_ sql: String) async throws(PostgresError) {
        try await onThread { handle in try handle.executeScript(sql) }
    }
}

extension ConnectionHandle {
    func executeScript(_ sql: String) throws(PostgresError) {
        let connection = try usableConnection()
        _ = try consume(PQexec(connection, sql), connection: connection, phase: .execute)
    }
}

/// `invalid input syntax for type integer: "abc"` -> `invalid input syntax for type integer: "…"`.
func redactingQuotedText(_ message: String) -> String {
    var result = ""
    var isQuoted = false
    for character in message {
        if character == "\"" {
            result.append(character)
            if !isQuoted { result.append("…") }
            isQuoted.toggle()
        } else if !isQuoted {
            result.append(character)
        }
    }
    return result
}

/// Counts `PGconn`s allocated and not yet freed, by target, so tests can prove that every one is
/// freed, failed connects included, while other tests run alongside.
@_spi(Testing) public enum LiveConnections {
    private static let counts = Locked([String: Int]())

    static func opened(_ target: String) { counts.withLock { $0[target, default: 0] += 1 } }
    static func finished(_ target: String) { counts.withLock { $0[target, default: 0] -= 1 } }

    /// `PGconn`s to `target` (as `PostgresConnection.describe` writes it) not yet freed.
    public static func count(target: String) -> Int { counts.withLock { $0[target] ?? 0 } }
}
