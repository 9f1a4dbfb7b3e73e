import AppStoreModels
import Foundation

/// What a receipt that keeps failing gets, decided here and nowhere else (docs/apple.md, "A
/// receipt that keeps failing"). Failing never changes an entitlement: only an account all of
/// whose receipts verified gets corrections. What changes is when the receipt is asked again and
/// who is told.
public enum PersistentFailure {
    public struct Policy: Sendable, Equatable {
        /// Runs in a row a receipt may fail before its account is reported on its own line (and the
        /// alert fires): a week of nightly runs by default (`--escalate-after`).
        public var escalateAfter: Int
        /// How long a receipt Apple called malformed `escalateAfter` runs in a row is set aside.
        public var setAsideFor: TimeInterval

        public init(escalateAfter: Int = 7, setAsideFor: TimeInterval = 30 * 86_400) {
            self.escalateAfter = max(1, escalateAfter)
            self.setAsideFor = setAsideFor
        }
    }

    public enum Decision: Sendable, Equatable {
        /// Asked again as its outcome says: a deferral's backoff, a final failure's 20 hours.
        case retry
        /// Not asked again for `for` seconds (or until `backfill` names it), with this reason.
        case setAside(reason: String, for: TimeInterval)
    }

    /// The decision for a receipt whose blob Apple called malformed `malformedInARow` runs in a
    /// row (this one included: 0 when this run's answer was not 21002), with `outcome` and Apple's
    /// last `status`.
    ///
    /// - 21002 ("malformed", which Apple also answers for a passing trouble) is retried within a
    ///   run and deferred; the same answer for the same blob `escalateAfter` runs in a row is the
    ///   receipt, not Apple: it is set aside, instead of being asked for every night. A new blob
    ///   starts over (`iap.receipt_blob_replaced`).
    /// - 21010 ("the user account cannot be found or has been deleted") is final for the night
    ///   and retried after 20 hours like any final failure: Apple did not say the purchases ended,
    ///   so access is neither granted nor revoked on it (a deleted Apple ID's refunds still come as
    ///   notifications), and after `escalateAfter` runs the account is reported for a person to
    ///   decide.
    public static func decide(outcome: ReceiptOutcome, status: Int?, malformedInARow: Int, policy: Policy) -> Decision {
        if outcome == .deferred, status == 21002, malformedInARow >= policy.escalateAfter {
            let days = Int((policy.setAsideFor / 86_400).rounded())
            return .setAside(
                reason: "set aside for \(days) days: Apple called the receipt malformed (21002) \(malformedInARow) runs in a row", for: policy.setAsideFor)
        }
        return .retry
    }

    /// Runs in a row Apple called the blob malformed, after this run's answer.
    public static func malformedInARow(outcome: ReceiptOutcome, status: Int?, before: Int) -> Int {
        outcome == .deferred && status == 21002 ? before + 1 : 0
    }

    /// Whether an account with a receipt failing this many runs in a row is reported on its own line.
    public static func isEscalated(failuresInARow: Int, policy: Policy) -> Bool {
        failuresInARow >= policy.escalateAfter
    }
}
