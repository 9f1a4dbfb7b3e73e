import Postgres
import Reconciliation

/// One run at a time per database, while shard workers of one layout run together: an unsharded
/// run takes the run lock exclusively; a shard worker of K/N takes it shared, the layout N's lock
/// shared, and its own shard's lock exclusively, and refuses to start while a worker of another
/// layout (`0/2` beside `0/4`) holds its layout's lock, since their shards overlap. Session locks
/// on the run's own connection: they end with the connection, even if the process is killed, so
/// a run checks that it still holds them before each write (`isHeld`).
public enum RunLock {
    static let runKey: Int64 = 0x7272_7275_6E00  // "rrrun"
    /// Layout N's key is `layoutClass << 32 | N`, so pg_locks shows it as (classid, objid) = (layoutClass, N).
    static let layoutClass: Int64 = 0x7272_6C79  // "rrly"
    /// Taken per transaction by every batch that applies corrections, from the moment it numbers
    /// them (`applied_seq`) until it commits: the numbers are then in commit order across shard
    /// workers, which is what a consumer's cursor needs (Migrations/0019).
    static let outboxKey: Int64 = 0x7272_6F75_7462  // "rroutb"

    /// The advisory keys a run of this shard holds.
    static func keys(shard: Shard?) -> [Int64] {
        guard let shard else { return [runKey] }
        return [runKey, layoutClass << 32 | Int64(shard.count), runKey + 1 + Int64(shard.count) << 20 + Int64(shard.index)]
    }

    /// Tries to take the lock; false when another run holds it (or a worker of another shard layout runs).
    public static func tryAcquire(_ connection: PostgresConnection, shard: Shard?) async throws -> Bool {
        let keys = keys(shard: shard)
        guard shard != nil else {
            return try await connection.query("SELECT pg_try_advisory_lock(\(keys[0])) AS ok")[0].decode("ok")
        }
        // Layout first, then the check for other layouts: two workers of different layouts starting
        // together may both refuse, but can never both run.
        let statements: [PostgresQuery] = [
            "SELECT pg_try_advisory_lock_shared(\(keys[0])) AS ok",
            "SELECT pg_try_advisory_lock_shared(\(keys[1])) AS ok",
            """
            SELECT NOT EXISTS (
                SELECT 1 FROM pg_locks
                WHERE locktype = 'advisory' AND granted AND objsubid = 1
                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND classid::bigint = \(layoutClass) AND objid::bigint <> \(Int64(shard!.count))) AS ok
            """,
            "SELECT pg_try_advisory_lock(\(keys[2])) AS ok",
        ]
        var taken = true
        for statement in statements where taken {
            taken = try await connection.query(statement)[0].decode("ok")
        }
        if !taken { await release(connection) }
        return taken
    }

    /// True while this connection's session still holds every lock of the run: false after the
    /// connection was lost and reconnected (the server restarted, the session was terminated).
    public static func isHeld(_ connection: PostgresConnection, shard: Shard?) async throws -> Bool {
        let keys = PostgresArray(keys(shard: shard))
        return try await connection.query("""
            SELECT count(DISTINCT (classid::bigint << 32) | objid::bigint) = cardinality(\(keys)::bigint[]) AS held
            FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND (classid::bigint << 32) | objid::bigint = ANY(\(keys)::bigint[])
            """)[0].decode("held")
    }

    public static func release(_ connection: PostgresConnection) async {
        _ = try? await connection.execute("SELECT pg_advisory_unlock_all()")
    }
}
