import Postgres

/// One run at a time per database, while shard workers run together: an unsharded run takes
/// the run lock exclusively; a shard worker takes it shared, plus its own shard's lock. Session
/// locks on the run's own connection: they end with the connection, even if the process is killed.
public enum RunLock {
    static let runKey: Int64 = 0x7272_7275_6E00  // "rrrun"

    /// Tries to take the lock; false when another run holds it.
    public static func tryAcquire(_ connection: PostgresConnection, shard: (index: Int, count: Int)?) async throws -> Bool {
        guard let shard else {
            return try await connection.query("SELECT pg_try_advisory_lock(\(runKey)) AS ok")[0].decode("ok")
        }
        guard try await connection.query("SELECT pg_try_advisory_lock_shared(\(runKey)) AS ok")[0].decode("ok", as: Bool.self) else {
            return false
        }
        let shardKey = runKey + 1 + Int64(shard.count) << 20 + Int64(shard.index)
        if try await connection.query("SELECT pg_try_advisory_lock(\(shardKey)) AS ok")[0].decode("ok", as: Bool.self) {
            return true
        }
        try await connection.execute("SELECT pg_advisory_unlock_shared(\(runKey))")
        return false
    }

    public static func release(_ connection: PostgresConnection) async {
        _ = try? await connection.execute("SELECT pg_advisory_unlock_all()")
    }
}
