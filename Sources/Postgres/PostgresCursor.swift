/// Rows of one query read in batches of `fetchSize` through a server-side cursor, so a result of
/// millions of rows is read in bounded memory. Lives inside `PostgresConnection.withCursor`.
public struct PostgresCursor: AsyncSequence, Sendable {
    public typealias Element = [PostgresRow]

    let connection: PostgresConnection
    let name: String
    let fetchSize: Int

    /// The next batch of rows, or nil when the result is exhausted.
    public func next() async throws(PostgresError) -> [PostgresRow]? {
        let rows = try await connection.query("FETCH FORWARD \(unescaped: String(fetchSize)) FROM \(unescaped: name)")
        return rows.isEmpty ? nil : rows
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let cursor: PostgresCursor
        var isDone = false

        public mutating func next() async throws -> [PostgresRow]? {
            guard !isDone else { return nil }
            let batch = try await cursor.next()
            if batch == nil { isDone = true }
            return batch
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(cursor: self)
    }
}

extension PostgresConnection {
    /// Declares a cursor for `query` inside a transaction of its own, hands it to `body`, and
    /// closes it (committing the read-only transaction) when `body` returns.
    @discardableResult
    public func withCursor<Result: Sendable>(
        _ query: PostgresQuery, fetchSize: Int = 1_000,
        _ body: (PostgresCursor) async throws -> Result
    ) async throws -> Result {
        precondition(fetchSize > 0, "fetchSize must be positive")
        return try await withTransaction { connection in
            let name = "receipt_reconciler_cursor"
            var declare = query
            declare.sql = "DECLARE \(name) NO SCROLL CURSOR FOR " + query.sql
            try await connection.execute(declare)
            let result = try await body(PostgresCursor(connection: connection, name: name, fetchSize: fetchSize))
            try await connection.execute("CLOSE \(unescaped: name)")
            return result
        }
    }
}
