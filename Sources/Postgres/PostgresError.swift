import Foundation

/// An error from PostgreSQL or from talking to it.
///
/// The description carries the SQLSTATE, the server's message and the phase, and never a bind
/// value or a password: errors end up in logs and reports.
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        public var description: String { name }

        /// Connecting or authenticating failed.
        public static let connectionFailed = Code(name: "connection failed")
        /// The connection string cannot be read (a configuration error, not the server's).
        public static let badConnectionString = Code(name: "bad connection string")
        /// A table or column name that is not a plain identifier (`copy(into:columns:)`): refused
        /// before anything is sent, since a name cannot be a bound parameter.
        public static let badIdentifier = Code(name: "bad identifier")
        /// The server went away while a statement was running or before it was sent, or said it
        /// is shutting down (SQLSTATE 08..., 57P01-03).
        public static let connectionLost = Code(name: "connection lost")
        /// The connection was closed by this process.
        public static let connectionClosed = Code(name: "connection closed")
        /// The server rejected a statement (see `sqlState`).
        public static let server = Code(name: "server error")
        /// A value in a result could not be decoded into the Swift type asked for.
        public static let decoding = Code(name: "decoding error")
    }

    /// Where the error happened.
    public enum Phase: String, Sendable {
        case connect, execute, decode, copy, transaction
    }

    public var code: Code
    public var phase: Phase
    /// The server's SQLSTATE (`23505` unique violation, `40001` serialization failure, ...), when it sent one.
    public var sqlState: String?
    /// The server's message; for connecting, words of this module's own, never libpq's message
    /// (which can echo the connection string: see `ConnectionFailure`). Bind values are never added here.
    public var message: String
    /// The server's DETAIL field, which may quote row values: kept out of `description`.
    public var detail: String?
    /// The column a decoding error is about.
    public var column: String?

    public init(
        code: Code, phase: Phase = .execute, sqlState: String? = nil, message: String,
        detail: String? = nil, column: String? = nil
    ) {
        self.code = code
        self.phase = phase
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.column = column
    }

    /// True when the connection itself failed, so the same work may succeed on a new connection.
    public var isConnectionError: Bool {
        code == .connectionLost || code == .connectionFailed
    }

    /// True when the server rolled the transaction back to resolve a conflict (a deadlock, a
    /// serialization failure): the same transaction may succeed when run again.
    public var isTransactionConflict: Bool {
        sqlState == "40P01" || sqlState == "40001"
    }

    /// True when the server cancelled the statement (SQLSTATE 57014): this process asked it to
    /// (a cancelled task, a stop signal), or a `statement_timeout` ran out.
    public var isStatementCancelled: Bool {
        sqlState == "57014"
    }

    public var description: String {
        var text = "PostgreSQL \(code) during \(phase.rawValue)"
        if let sqlState { text += " [SQLSTATE \(sqlState)]" }
        if let column { text += " in column \"\(column)\"" }
        text += ": " + message.trimmingCharacters(in: .whitespacesAndNewlines)
        return text
    }
}
