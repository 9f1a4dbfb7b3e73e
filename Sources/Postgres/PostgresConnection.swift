import CLibPQ
import Foundation
import Locking
import Logging

/// One connection to PostgreSQL through libpq.
///
/// Every libpq call runs on a thread owned by this connection, never on Swift's cooperative
/// pool. Statements run one at a time in the order they are awaited: a connection serves one task
/// at a time (use one connection per concurrent worker).
///
/// After the server drops the connection, the next statement reconnects, except inside a
/// transaction: there the transaction is lost, so its remaining statements fail with
/// `connectionLost` and the caller decides whether to retry the whole transaction.
///
/// `Sendable`: its mutable state lives in `ConnectionHandle`, which only the thread touches, and
/// in `StatementCanceller`, behind its lock.
public final class PostgresConnection: Sendable {
    let thread: BlockingThread
    let handle: ConnectionHandle
    /// Cancels the statement this connection waits on when its task is cancelled.
    let canceller: StatementCanceller
    /// host, port, database and user, for logs; never the password.
    public let target: String
    /// Where what the caller cannot be told goes: a ROLLBACK that failed after the error it answers.
    let logger: Logger

    private init(thread: BlockingThread, handle: ConnectionHandle, canceller: StatementCanceller, target: String, logger: Logger) {
        self.thread = thread
        self.handle = handle
        self.canceller = canceller
        self.target = target
        self.logger = logger
    }

    deinit {
        RunningStatements.unregister(canceller)
        let handle = self.handle
        thread.finish { handle.close() }
    }

    /// Connects with a libpq connection string (`host=... dbname=...`) or a `postgresql://` URI.
    public static func connect(
        _ connectionString: String, applicationName: String = "receipt-reconciler",
        logger: Logger = Logger(label: "receipt-reconciler.postgres")
    ) async throws(PostgresError) -> PostgresConnection {
        if let problem = ConnectionFailure.unsafeConnectionString(connectionString) {
            throw PostgresError(code: .badConnectionString, phase: .connect, message: problem)
        }
        let target = describe(connectionString)
        let thread = BlockingThread(name: "libpq")
        let canceller = StatementCanceller()
        let handle = ConnectionHandle(connectionString: connectionString, applicationName: applicationName, target: target, canceller: canceller)
        let connection = PostgresConnection(thread: thread, handle: handle, canceller: canceller, target: target, logger: logger)
        RunningStatements.register(canceller)
        try await connection.onThread { handle in try handle.connect() }
        return connection
    }

    /// Runs a statement and returns all its rows.
    public func query(_ query: PostgresQuery) async throws(PostgresError) -> [PostgresRow] {
        try await onThread { handle in try handle.execute(query).rows }
    }

    /// Runs a statement and returns the number of rows it inserted, updated or deleted.
    @discardableResult
    public func execute(_ query: PostgresQuery) async throws(PostgresError) -> Int {
        try await onThread { handle in try handle.execute(query).affectedRows }
    }

    /// How a transaction sees the database.
    public enum TransactionMode: String, Sendable {
        /// PostgreSQL's default (read committed): each statement sees what was committed before it.
        case readCommitted = "BEGIN"
        /// One snapshot for every statement, read only: several reads that must agree with each other.
        case snapshotReadOnly = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    @discardableResult
    public func withTransaction<Result: Sendable>(
        _ mode: TransactionMode = .readCommitted, _ body: (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        try await onThread(cancellable: false) { handle in try handle.begin(mode.rawValue) }
        let result: Result
        do {
            result = try await body(self)
        } catch {
            do {
                try await onThread(cancellable: false) { handle in try handle.rollback() }
            } catch let failure {
                // The caller hears of the error that failed the transaction; this one would be lost.
                logger.warning("postgres.rollback_failed", metadata: [
                    "postgres.database": "\(target)", "postgres.error": "\(failure)",
                    "postgres.reason": "the connection was discarded; the next statement connects afresh",
                ])
            }
            throw error
        }
        // A COMMIT is never cancelled: one waiting on a synchronous standby would end committed
        // here alone, with a warning nobody reads.
        try await onThread(cancellable: false) { handle in try handle.commit() }
        return result
    }

    /// Closes the connection now; later statements fail with `connectionClosed`.
    public func close() async {
        try? await onThread { handle in handle.close() }
    }

    /// The server's process id for this session, e.g. to terminate it in a test.
    public func backendProcessID() async throws(PostgresError) -> Int32 {
        try await onThread { handle in try handle.backendProcessID() }
    }

    /// The notifications of channels this session `LISTEN`s to, received so far, in the order the
    /// transactions that sent them committed; each is returned once.
    public func notifications() async throws(PostgresError) -> [PostgresNotification] {
        try await onThread { handle in try handle.notifications() }
    }

    /// Runs `body` on the connection's thread. When the awaiting task is cancelled, the statement
    /// is cancelled on the server if it is still running `cancellationGrace` later (it then fails
    /// with SQLSTATE 57014); so when the process is stopping (`stopping()`). Not when
    /// `cancellable` is false (COMMIT, ROLLBACK) or within `uncancelled`, and not for a task
    /// cancelled already: what it runs then is its rollback and its cleanup.
    func onThread<Result: Sendable>(
        cancellable: Bool = true, _ body: @escaping @Sendable (ConnectionHandle) throws -> Result
    ) async throws(PostgresError) -> Result {
        let (handle, canceller) = (self.handle, self.canceller)
        let serial = canceller.reserve()
        let cancellable = cancellable && !Self.isUncancelled && !Task.isCancelled
        let work: @Sendable () throws -> Result = { try canceller.running(serial, cancellable: cancellable) { try body(handle) } }
        do {
            guard cancellable else { return try await thread.run(work) }
            return try await withTaskCancellationHandler {
                try await thread.run(work)
            } onCancel: {
                canceller.cancel(serial, after: Self.cancellationGrace)
            }
        } catch let error as PostgresError {
            throw error
        } catch {
            throw PostgresError(code: .connectionClosed, message: "\(error)")
        }
    }

    /// `host:port/dbname as user`, read with libpq's own parser so a password never shows.
    public static func describe(_ connectionString: String) -> String {
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &errorMessage) else {
            if let errorMessage { PQfreemem(errorMessage) }
            return "(unparsable connection string)"
        }
        defer { PQconninfoFree(options) }
        var values: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { values[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        let host = values["host"] ?? values["hostaddr"] ?? "local socket"
        let port = values["port"].map { ":" + $0 } ?? ""
        let database = values["dbname"] ?? "(default database)"
        let user = values["user"].map { " as " + $0 } ?? ""
        return "\(host)\(port)/\(database)\(user)"
    }
}

/// What a statement returned.
struct StatementResult: Sendable {
    var rows: [PostgresRow] = []
    var affectedRows = 0
}

/// A `NOTIFY` received on a channel the session listens to.
public struct PostgresNotification: Sendable, Equatable {
    public var channel: String
    public var payload: String

    public init(channel: String, payload: String) {
        self.channel = channel
        self.payload = payload
    }
}
