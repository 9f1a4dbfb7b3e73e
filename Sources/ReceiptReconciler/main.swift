import Dispatch
import Glibc

// Synchronous on purpose. An `async` main ends in `dispatch_main`, which parks the main thread
// in `sigsuspend` with no signal blocked: SIGTERM would be delivered there and end the process
// mid-run, whatever `StopSignals` set up. Here the main thread waits with the stop signals
// blocked, and the commands run on Swift's cooperative pool (detached: top-level code is on
// the main actor, whose queue nothing drains now; nothing here uses the main actor).
disableCoreDumps()
// libcurl writes the TLS session keys of every connection to the file SSLKEYLOGFILE names, when
// it starts: whoever can set the job's environment could then read its traffic with Apple.
// Removed here, before any thread starts, never read.
unsetenv("SSLKEYLOGFILE")
StopSignals.takeOver()
let finished = DispatchSemaphore(value: 0)
Task.detached {
    await ReceiptReconciler.main()
    finished.signal()
}
finished.wait()
