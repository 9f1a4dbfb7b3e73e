import CLibPQ

/// Why a connection failed, in words that cannot carry the connection string.
///
/// libpq's connection messages quote what it parsed: a password with `%` comes back as `invalid
/// percent-encoded token: "..."`, and one with an unescaped `@` turns its tail into the "host" of
/// `could not translate host name "..."`. Those messages are never passed on; the job names the
/// host, port, database and user itself (`PostgresConnection.describe`) and the kind of failure.
enum ConnectionFailure {
    /// Known failures, by the words of libpq and the server that identify them.
    private static let kinds: [(clue: String, reason: String)] = [
        ("password authentication failed", "password authentication failed"),
        ("no password supplied", "the server wants a password and none was given"),
        ("no pg_hba.conf entry", "the server's pg_hba.conf does not admit this client"),
        ("connection refused", "connection refused (is PostgreSQL running and listening there?)"),
        ("could not translate host name", "the host name does not resolve"),
        ("timeout expired", "timed out"),
        ("remaining connection slots", "the server has no connection slot free"),
        ("too many connections", "the server has no connection slot free"),
        ("the database system is starting up", "the server is starting up"),
        ("the database system is shutting down", "the server is shutting down"),
        ("the database system is in recovery mode", "the server is in recovery"),
        ("ssl", "the SSL handshake failed"),
        ("no such file or directory", "no server listens on that local socket"),
    ]

    static func reason(libpqMessage message: String) -> String {
        let lowered = message.lowercased()
        if lowered.contains("database"), lowered.contains("does not exist") { return "the database does not exist" }
        if lowered.contains("role"), lowered.contains("does not exist") { return "the user does not exist" }
        if let kind = kinds.first(where: { lowered.contains($0.clue) }) { return kind.reason }
        return "the server refused the connection (libpq's own message is withheld: it can echo the connection string)"
    }

    /// A connection string libpq would misread in a way that puts the password in its messages or
    /// sends it to the wrong host: refused before any connection is tried.
    static func unsafeConnectionString(_ text: String) -> String? {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(text, &error) else {
            if let error { PQfreemem(error) }  // it may quote the password: dropped unread
            return "DATABASE_URL cannot be parsed; in a postgresql:// URI, percent-encode the password's special characters (% as %25, @ as %40)"
        }
        PQconninfoFree(options)
        for scheme in ["postgresql://", "postgres://"] where text.lowercased().hasPrefix(scheme) {
            let rest = text.dropFirst(scheme.count)
            let authority = rest.prefix { $0 != "/" && $0 != "?" }
            if authority.filter({ $0 == "@" }).count > 1 {
                return "DATABASE_URL holds more than one @ before the host; percent-encode an @ in the password as %40"
            }
        }
        return nil
    }
}
