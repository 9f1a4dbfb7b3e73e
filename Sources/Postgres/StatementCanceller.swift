import CivilCalendar
import CLibPQ
import Foundation
import Locking

/// Cancels the statement a connection is waiting on (docs/operating.md, "Stopping a statement"):
/// without it a task cancelled, or a process stopped, leaves its statement running on the server
/// until it ends by itself, a lock wait for as long as the lock is held.
///
/// libpq's `PQcancel` opens a connection of its own to the server and waits for it to take the
/// request, so it is called from a thread started for it, never from Swift's cooperative pool
/// nor from the connection's thread (which is the one waiting). A statement is cancelled only if
/// it is still the one that was running when it was asked, and the lock is held across the
/// request, so the statement cannot be marked finished (and the next one begun) meanwhile: a
/// request that comes too late finds the connection idle, and the server drops a cancel that
/// reaches an idle session. Statements run `uncancelled` (a COMMIT, a ROLLBACK, a run's last
/// writes) are never cancelled.
///
/// `@unchecked Sendable`: its state is only touched while holding `lock`, on any thread.
final class StatementCanceller: @unchecked Sendable {
    private let lock = NSLock()
    /// libpq's cancel key of the live connection, made once it is set up and freed when it goes.
    private var key: OpaquePointer?
    /// The statement running now, by the serial it was given when it was queued.
    private var running: (serial: UInt64, cancellable: Bool)?
    private var lastSerial: UInt64 = 0

    deinit {
        if let key { PQfreeCancel(key) }
    }

    /// Called on the connection's thread once it has connected and been set up.
    func connected(_ connection: OpaquePointer) {
        let fresh = PQgetCancel(connection)
        lock.withLock {
            if let key { PQfreeCancel(key) }
            key = fresh
        }
    }

    /// Called on the connection's thread before its `PGconn` is freed.
    func disconnected() {
        lock.withLock {
            if let key { PQfreeCancel(key) }
            key = nil
        }
    }

    /// A serial for a statement about to be queued.
    func reserve() -> UInt64 {
        lock.withLock {
            lastSerial += 1
            return lastSerial
        }
    }

    /// Marks `serial` as the statement running, for the duration of `body`, on the connection's
    /// thread. Once the process is stopping, a cancellable statement that begins is cancelled if
    /// it is still running after the grace, like those that were running when the stop came.
    func running<Result>(_ serial: UInt64, cancellable: Bool, _ body: () throws -> Result) rethrows -> Result {
        lock.withLock { running = (serial, cancellable) }
        defer { lock.withLock { running = nil } }
        if cancellable && StopCancellation.isStopping { cancel(serial, after: PostgresConnection.cancellationGrace) }
        return try body()
    }

    /// The cancellable statement running now, if any.
    var current: UInt64? { lock.withLock { running.flatMap { $0.cancellable ? $0.serial : nil } } }

    /// Asks the server to cancel statement `serial` if it is still running. Blocks for a round
    /// trip to the server (longer when the server's host is unreachable): call it from a thread
    /// of its own.
    @discardableResult
    func cancel(_ serial: UInt64) -> Bool {
        lock.withLock {
            guard let key, let running, running.serial == serial, running.cancellable else { return false }
            var reason = [CChar](repeating: 0, count: 256)
            return PQcancel(key, &reason, Int32(reason.count)) == 1
        }
    }

    /// Cancels statement `serial` from a thread started for it, if it is still running `grace`
    /// later: a statement still running then is waiting on something, while one about to finish
    /// is left to finish.
    func cancel(_ serial: UInt64, after grace: Duration) {
        let thread = Thread { [self] in
            Thread.current.name = "libpq-cancel"  // set inside: a name set before start() does not stick on Linux
            if grace > .zero { Thread.sleep(forTimeInterval: grace.timeInterval) }
            cancel(serial)
        }
        thread.start()
    }
}

/// Every open connection's canceller, so that a stop reaches the statements of them all.
enum RunningStatements {
    private final class Entry: @unchecked Sendable {
        weak var canceller: StatementCanceller?
        init(_ canceller: StatementCanceller) { self.canceller = canceller }
    }

    private static let entries = Locked<[ObjectIdentifier: Entry]>([:])

    static func register(_ canceller: StatementCanceller) {
        entries.withLock { $0[ObjectIdentifier(canceller)] = Entry(canceller) }
    }

    static func unregister(_ canceller: StatementCanceller) {
        _ = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(canceller)) }
    }

    /// The cancellable statements running now, each with its connection's canceller.
    static func now() -> [(canceller: StatementCanceller, serial: UInt64)] {
        let cancellers = entries.withLock { $0.values.compactMap(\.canceller) }
        return cancellers.compactMap { canceller in canceller.current.map { (canceller, $0) } }
    }
}

/// Whether this process is stopping (a stop signal): from then on every cancellable statement is
/// cancelled once it has run for the grace.
enum StopCancellation {
    private static let stopping = Locked(false)

    static var isStopping: Bool { stopping.withLock { $0 } }

    static func begin() { stopping.withLock { $0 = true } }
}

extension PostgresConnection {
    /// A statement still running this long after its task was cancelled, or after the process
    /// was told to stop, is cancelled: one still running then waits on something (a lock, a
    /// `pg_sleep`), while one about to finish is left to finish.
    public static let cancellationGrace: Duration = .milliseconds(500)

    /// The process is stopping (SIGTERM, SIGINT): every cancellable statement of every connection,
    /// running now or begun later, is cancelled once it has run for `cancellationGrace`. Returns
    /// at once; the requests are made from threads of their own. Call it from a thread of its own
    /// (the stop-signal thread), before any task hears of the stop. Returns how many statements
    /// were running.
    @discardableResult
    public static func stopping() -> Int {
        StopCancellation.begin()
        let running = RunningStatements.now()
        for (canceller, serial) in running { canceller.cancel(serial, after: cancellationGrace) }
        return running.count
    }

    /// Whether `stopping()` was called: a statement cancelled since may have been cancelled by it.
    public static var isStopping: Bool { StopCancellation.isStopping }

    /// Whether statements `body` runs are kept from cancellation: a task's cancellation and a stop
    /// reach them not. For what must land whatever happens: a run's last writes after a stop.
    @TaskLocal static var isUncancelled = false

    /// Runs `body` with its statements kept from cancellation (`isUncancelled`).
    public static func uncancelled<Result>(_ body: () async throws -> Result) async rethrows -> Result {
        try await $isUncancelled.withValue(true) { try await body() }
    }
}
