#if DEBUG
import Foundation
#endif

/// Faults that exist in test builds only: a debug build (what the tests run) reads them from the
/// environment; a release build (`swift build -c release`, what is shipped) has none of this code.
enum TestFault {
    /// `RR_TEST_DIE_ON_NOTIFICATION=ID`: the process kills itself (SIGKILL, as the out-of-memory
    /// killer would) when it starts processing notification ID: a poison row, for the quarantine's
    /// end-to-end test.
    static func dieIfPoison(notificationId: Int64) {
        #if DEBUG
        if let poison = ProcessInfo.processInfo.environment["RR_TEST_DIE_ON_NOTIFICATION"], poison == String(notificationId) {
            kill(getpid(), SIGKILL)
        }
        #endif
    }

    /// `RR_TEST_DIE_ON_ACCOUNT=ID`: the process kills itself (SIGKILL) when it starts verifying
    /// account ID, with or without other accounts in flight.
    static func dieIfPoison(accountId: String) {
        #if DEBUG
        if poisonAccount == accountId { kill(getpid(), SIGKILL) }
        #endif
    }

    /// `RR_TEST_DIE_ON_CONSUMPTION_SEND=TRANSACTION_ID`: the process kills itself (SIGKILL) once
    /// the answer to that transaction's request is recorded `sending`, before its request leaves.
    static func dieIfPoison(consumptionAnswerOf transactionId: String) {
        #if DEBUG
        if ProcessInfo.processInfo.environment["RR_TEST_DIE_ON_CONSUMPTION_SEND"] == transactionId { kill(getpid(), SIGKILL) }
        #endif
    }

    #if DEBUG
    /// Read once: the environment is copied on each read, and this is asked for every account.
    private static let poisonAccount = ProcessInfo.processInfo.environment["RR_TEST_DIE_ON_ACCOUNT"]
    #endif
}
