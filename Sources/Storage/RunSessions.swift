import Foundation
import Postgres
import Reconciliation

/// A run's three sessions with the database, each serving one task at a time: one holds the run
/// lock for the whole run, one reads pages of accounts, one writes batches, so pages are read
/// while batches are written. The run gets stores and the lock, never a connection: every
/// transaction it needs is a method of Storage.
public struct RunSessions: Sendable {
    private let lockConnection: PostgresConnection
    public let reader: ReconciliationStore
    public let writer: ReconciliationStore

    public init(lock: PostgresConnection, reader: PostgresConnection, writer: PostgresConnection) {
        lockConnection = lock
        self.reader = ReconciliationStore(connection: reader)
        self.writer = ReconciliationStore(connection: writer)
    }

    /// The notifications, on the writer's session (one notification's work is one transaction there).
    public var notifications: NotificationStore { NotificationStore(connection: writer.connection) }

    /// Takes the run lock of this shard (`RunLock`); false when another run holds it.
    public func acquireLock(shard: Shard?) async throws -> Bool {
        try await RunLock.tryAcquire(lockConnection, shard: shard)
    }

    /// True while the lock's session still holds it (false after that connection was lost).
    public func holdsLock(shard: Shard?) async throws -> Bool {
        try await RunLock.isHeld(lockConnection, shard: shard)
    }

    public func releaseLock() async {
        await RunLock.release(lockConnection)
    }

    /// Closes the three sessions (the lock goes with its session).
    public func close() async {
        await lockConnection.close()
        await reader.connection.close()
        await writer.connection.close()
    }
}
