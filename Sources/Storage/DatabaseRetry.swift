import Logging
import Postgres
import Throttling

/// Runs a unit of database work again when the connection was lost (the server restarted, a
/// network blip) or the server rolled its transaction back to break a deadlock. The connection
/// reconnects on its next statement, and each unit commits whole or not at all (a batch counts
/// itself, so one whose COMMIT landed unacknowledged is not written twice), so repeating it is
/// safe. Every other error is the caller's at once.
public enum DatabaseRetry {
    /// 0.5 s doubling to 15 s, without jitter: eight attempts span about 45 s, long enough for a
    /// server restart (DatabaseRestartTests), short enough that a database gone for good fails
    /// the night within a minute.
    static let backoff = Backoff(base: .milliseconds(500), maximum: .seconds(15))
    static let attempts = 8

    /// True for the failures that running the same work again may cure.
    public static func isTransient(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.isConnectionError || error.isTransactionConflict
    }

    /// `body`, again after each transient failure (told to `retrying` before the wait), at most
    /// eight times in all.
    public static func run<Result>(
        retrying: (_ attempt: Int, _ error: any Error) -> Void, _ body: () async throws -> Result
    ) async throws -> Result {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch where isTransient(error) && attempt < attempts {
                retrying(attempt, error)
                try await Task.sleep(for: backoff.ceiling(afterAttempt: attempt))
                attempt += 1
            }
        }
    }
}

extension DatabaseRetry {
    /// `run`, each retry logged as `database.retrying`.
    public static func run<Result>(logger: Logger, _ body: () async throws -> Result) async throws -> Result {
        try await run(retrying: { attempt, error in
            logger.warning("database.retrying", metadata: ["database.attempt": .stringConvertible(attempt), "error": "\(error)"])
        }, body)
    }
}

/// Statements and a stop (docs/operating.md, "Stopping a statement"), for the jobs, which do not
/// talk to PostgreSQL themselves.
public enum StatementStop {
    /// True for a statement the server cancelled: a stop's, a cancelled task's (or a `statement_timeout`).
    public static func isCancellation(_ error: any Error) -> Bool {
        (error as? PostgresError)?.isStatementCancelled == true
    }

    /// Whether a stop signal came: from then on a statement running past the grace is cancelled.
    public static var isStopping: Bool { PostgresConnection.isStopping }

    /// Runs `body` with its statements never cancelled: what must land after a stop (a run's
    /// ending, the marks it takes back).
    public static func uncancelled<Result>(_ body: () async throws -> Result) async rethrows -> Result {
        try await PostgresConnection.uncancelled(body)
    }
}
