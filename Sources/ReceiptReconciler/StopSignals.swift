import CivilCalendar
import Foundation
import Locking
import Postgres

/// SIGTERM and SIGINT (`systemctl stop`, `kubectl delete`, Ctrl-C), owned by one thread.
///
/// First thing in `main` both are blocked, so every thread started afterwards has them blocked
/// too, and a thread of their own takes them with `sigwait(3)`. While a run listens (`stream()`)
/// each signal is an element of its sequence: stop taking accounts, finish, commit. With nobody
/// listening (any other command, or before a run starts) the signal does what it always does and
/// ends the process. Either way the statements waiting on the database are cancelled once they
/// have run for `PostgresConnection.cancellationGrace` (docs/operating.md, "Stopping a
/// statement"): a process that ends leaves its statement running on the server until the server
/// next writes to it, which for a lock wait is when the lock is released. Blocking also undoes
/// nothing a parent did: a parent that started this process with the signals blocked (a test
/// runner's worker threads block every signal) is heard all the same, since `sigwait` takes
/// blocked signals.
///
/// Tried before and not kept: a `sigaction` handler (with a pipe, with DispatchSource, or with a
/// flag polled every 50 ms). The thread sanitizer holds a handled signal back until a thread of
/// its choosing reaches an intercepted call; `sigwait` involves no handler.
enum StopSignals {
    /// The one listener (a run), if any.
    /// `Locked`, which the thread sanitizer sees (it cannot see `Synchronization.Mutex`).
    private static let listener = Locked<AsyncStream<Int32>.Continuation?>(nil)
    /// Set when a signal ends the process: the error a cancelled statement gives a task meanwhile
    /// is not this process's ending, the signal is.
    private static let ending = Locked(false)

    /// Whether a stop signal is ending the process.
    static var isEnding: Bool { ending.withLock { $0 } }

    /// Waits for the stop signal to end the process: a command whose statement the stop
    /// cancelled must not exit 1 first (`runReportingErrors`).
    static func waitToEnd() async -> Never {
        while true { try? await Task.sleep(for: .seconds(60)) }
    }

    private static var stopSet: sigset_t {
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGINT)
        return signals
    }

    /// Blocks SIGTERM and SIGINT and starts the thread that takes them. Called first thing in
    /// `main`, before any other thread exists.
    static func takeOver() {
        var signals = stopSet
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        let taker = Thread {
            var signals = stopSet
            while true {
                var received: Int32 = 0
                guard sigwait(&signals, &received) == 0 else { continue }
                // A run listening stops gracefully. Its statements are the stop's to cancel from
                // before it hears of the stop: a cancelled one means stopped, not failed.
                let heard = listener.withLock { listener -> Bool in
                    guard let listener else { return false }
                    PostgresConnection.stopping()
                    listener.yield(received)
                    return true
                }
                if !heard {
                    // Nobody stops gracefully: the process ends. First its statements still
                    // running half a second on are cancelled (a short write lands meanwhile); a
                    // cancel that cannot reach the server does not hold the end up for long.
                    ending.withLock { $0 = true }
                    if PostgresConnection.stopping() > 0 {
                        Thread.sleep(forTimeInterval: PostgresConnection.cancellationGrace.timeInterval + 0.5)
                    }
                    end(by: received)
                }
            }
        }
        taker.name = "stop-signals"
        taker.start()
    }

    /// The stop signals from now until the stream is dropped, for the one caller that handles
    /// them (a run); other commands never listen.
    static func stream() -> AsyncStream<Int32> {
        let (signals, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(4))
        continuation.onTermination = { _ in listener.withLock { $0 = nil } }
        listener.withLock { $0 = continuation }
        return signals
    }

    /// Ends the process by `signal`, as if it had never been blocked: the exit status says so.
    private static func end(by signal: Int32) -> Never {
        Foundation.signal(signal, SIG_DFL)
        var only = sigset_t()
        sigemptyset(&only)
        sigaddset(&only, signal)
        pthread_sigmask(SIG_UNBLOCK, &only, nil)
        raise(signal)
        exit(128 + signal)
    }
}
