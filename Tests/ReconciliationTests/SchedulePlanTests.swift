import AppStoreModels
import Foundation
import Reconciliation
import Testing
import TestSupport

/// A rolling run's arithmetic: how many accounts a window holds at the budget, what they cost,
/// and when the full cycle completes. Every expected number is worked out by hand in its comment.
@Suite struct SchedulePlanTests {
    @Test(arguments: [
        // 25/s for 4h is 360,000 history requests; at 1.1 an account, 327,272 accounts. Statuses:
        // 360,000 / 0.9 = 400,000. History runs out first.
        (4.0 * 3600, 25.0, 25.0, 1.1, 0.9, 327_272),
        // Statuses cost more here (2 an account): 25 x 60 / 2 = 750; history 25 x 60 / 1 = 1,500.
        (60.0, 25.0, 25.0, 1.0, 2.0, 750),
        // The sandbox's 2.5/s for 10 s: 25 / 1.1 = 22.7, so 22.
        (10.0, 2.5, 2.5, 1.1, 0.9, 22),
        // No statuses at all (no subscriber): history alone decides, 5 x 100 / 1.25 = 400.
        (100.0, 5.0, 5.0, 1.25, 0.0, 400),
    ] as [(Double, Double, Double, Double, Double, Int)])
    func capacityIsWhatTheFirstEndpointToRunOutAllows(
        window: Double, historyBudget: Double, statusesBudget: Double, historyPerAccount: Double, statusesPerAccount: Double, expected: Int
    ) {
        #expect(SchedulePlan.capacity(
            windowSeconds: window, budgetPerSecond: [.history: historyBudget, .statuses: statusesBudget],
            requestsPerAccount: [.history: historyPerAccount, .statuses: statusesPerAccount]) == expected)
    }

    static let now = Date(ms: 1_790_000_000_000)  // 2026-09-21T14:13:20Z

    static func plan(due: [ScheduleReason: Int], scheduled: [ScheduleReason: Int], capacity: Int?) -> SchedulePlan {
        SchedulePlan(due: due, scheduled: scheduled, windowSeconds: capacity == nil ? nil : 4 * 3600, capacity: capacity,
                     requestsPerAccount: [.history: 1.1, .statuses: 0.9], budgetPerSecond: [.history: 25, .statuses: 25],
                     fullCycleSeconds: 7 * 86_400, plannedAt: now)
    }

    @Test func aNightThatHoldsEverythingCompletesTheCycleTonight() {
        let plan = Self.plan(due: [.notified: 3, .atRisk: 10, .cycle: 100], scheduled: [.notified: 3, .atRisk: 10, .cycle: 100], capacity: nil)
        #expect(plan.totalDue == 113 && plan.totalScheduled == 113 && plan.leftForNextNight == 0)
        #expect(plan.fullCycleCompleteBy == nil)
        // 113 x 1.1 = 124.3, up: 125 history; 113 x 0.9 = 101.7, up: 102 statuses. 125 / 25 = 5 s.
        #expect(plan.estimatedRequests == [.history: 125, .statuses: 102])
        #expect(plan.estimatedSeconds == 5)
    }

    @Test func whatTheWindowLeavesIsDoneOnLaterNights() {
        // Capacity 1,000: tonight 20 notified, 80 at risk and 900 of 10,000 in the cycle. 9,100 of
        // the cycle are left; a night holds 1,000 - 20 - 80 = 900 of them: 9,100 / 900 = 10.1, so
        // 11 nights: 2026-10-02.
        let plan = Self.plan(due: [.notified: 20, .atRisk: 80, .cycle: 10_000], scheduled: [.notified: 20, .atRisk: 80, .cycle: 900],
                             capacity: 1_000)
        #expect(plan.leftForNextNight == 9_100)
        #expect(plan.fullCycleCompleteBy == Self.now.addingTimeInterval(11 * 86_400))
        #expect(plan.lines.last == "  left for the next night: 9100; the full cycle (7d) completes by 2026-10-02")
        #expect(plan.lines.first == "Plan: 1000 of 10100 due accounts tonight (the window of 4h holds 1000 at the budget)")
        #expect(plan.lines[1] == "  by reason: notified 20 of 20, at risk 80 of 80, full cycle 900 of 10000")
    }

    @Test func aWindowFullOfUrgentAccountsSaysTheCycleCannotProgress() {
        let plan = Self.plan(due: [.notified: 600, .atRisk: 600, .cycle: 50], scheduled: [.notified: 600, .atRisk: 400], capacity: 1_000)
        #expect(plan.fullCycleCompleteBy == nil)
        #expect(plan.lines.last?.contains("widen --window or raise the budget") == true)
    }
}
