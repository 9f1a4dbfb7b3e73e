import AppStoreModels
import Reconciliation
import Testing

/// What a receipt that keeps failing gets (docs/apple.md, "A receipt that keeps failing"), decided
/// by hand for each outcome and status around the limit.
@Suite struct PersistentFailureTests {
    static let policy = PersistentFailure.Policy(escalateAfter: 7)

    @Test(arguments: [
        // (outcome, status, runs in a row Apple called this blob malformed, set aside?)
        (ReceiptOutcome.deferred, 21002 as Int?, 6, false),  // not yet: Apple's passing trouble looks the same
        (.deferred, 21002, 7, true),
        (.deferred, 21002, 30, true),
        (.deferred, 21100, 7, false),  // Apple's own trouble: retried as long as it lasts
        (.deferred, nil, 9, false),  // the network's
        (.failed, 21010, 7, false),  // the account gone: asked again after 20 hours, reported
        (.failed, 21002, 7, false),  // only a deferral can be the 21002 rule's
        (.invalidReceipt, nil, 7, false),
        (.verified, nil, 0, false),
    ])
    func setAsideOnlyWhatAppleKeepsCallingMalformed(outcome: ReceiptOutcome, status: Int?, runs: Int, setAside: Bool) {
        let decision = PersistentFailure.decide(outcome: outcome, status: status, malformedInARow: runs, policy: Self.policy)
        if setAside {
            #expect(decision == .setAside(reason: "set aside for 30 days: Apple called the receipt malformed (21002) \(runs) runs in a row",
                                          for: 30 * 86_400))
        } else {
            #expect(decision == .retry)
        }
    }

    /// Only 21002 after 21002 counts: six nights of Apple's 5xx and one 21002 are one, not seven.
    @Test func onlyMalformedAfterMalformedCounts() {
        var runs = 0
        for status in [500, 500, 500, 500, 500, 500, 21002] as [Int?] {
            runs = PersistentFailure.malformedInARow(outcome: .deferred, status: status, before: runs)
        }
        #expect(runs == 1)
        #expect(PersistentFailure.malformedInARow(outcome: .verified, status: 0, before: 6) == 0)
        #expect(PersistentFailure.malformedInARow(outcome: .deferred, status: 21002, before: 6) == 7)
    }

    @Test func escalatedFromTheLimitOn() {
        #expect(!PersistentFailure.isEscalated(failuresInARow: 6, policy: Self.policy))
        #expect(PersistentFailure.isEscalated(failuresInARow: 7, policy: Self.policy))
        #expect(PersistentFailure.Policy(escalateAfter: 0).escalateAfter == 1)
    }
}
