import Foundation
import Reconciliation
import Testing

/// Where a run reads Get Notification History (docs/notifications.md, "Notification history: the
/// delta feed"), derived by hand from Apple's limits (180 days production, 30 sandbox), the hour of
/// overlap, the hour of margin off Apple's limit and day-long slices.
@Suite struct NotificationHistoryPlanTests {
    static let now = Date(timeIntervalSince1970: 1_790_000_000.75)  // a fraction: slices are whole seconds
    static let second = Date(timeIntervalSince1970: 1_790_000_000)
    static let day: TimeInterval = 86_400

    static func at(_ daysBack: Double, hours: Double = 0) -> Date {
        second.addingTimeInterval(-daysBack * day + hours * 3600)
    }

    @Test func aNightlyReadIsOneSliceFromTheWatermarkLessTheOverlap() throws {
        let plan = try #require(NotificationHistoryPlan.make(watermark: Self.at(1), unfinished: nil, firstSince: nil, now: Self.now, sandbox: false))
        #expect(plan.first == NotificationHistorySlice(start: Self.at(1, hours: -1), end: Self.second))
        #expect(plan.unreachable == nil && plan.resumeToken == nil && plan.slice(after: plan.first) == nil)
    }

    @Test func aFirstReadIsThirtyDaySlicesAndTheSandboxsStartsWhereAppleServes() throws {
        let production = try #require(NotificationHistoryPlan.make(watermark: nil, unfinished: nil, firstSince: nil, now: Self.now, sandbox: false))
        var slices = [production.first]
        while let next = production.slice(after: slices.last!) { slices.append(next) }
        #expect(slices.count == 30 && slices.first?.start == Self.now.addingTimeInterval(-30 * Self.day).rounded && slices.last?.end == Self.second)
        #expect(zip(slices, slices.dropFirst()).allSatisfy { $0.end == $1.start })
        let sandbox = try #require(NotificationHistoryPlan.make(watermark: nil, unfinished: nil, firstSince: nil, now: Self.now, sandbox: true))
        // 30 days less the hour's margin, rounded up to a second: Apple would refuse the 30th day's first hour.
        #expect(sandbox.first.start == Self.at(30, hours: 1).addingTimeInterval(1) && sandbox.unreachable == nil)
    }

    @Test func aWatermarkPastWhatAppleServesIsReportedAndSkipped() throws {
        let plan = try #require(NotificationHistoryPlan.make(watermark: Self.at(40), unfinished: nil, firstSince: nil, now: Self.now, sandbox: true))
        #expect(plan.unreachable == NotificationHistorySlice(start: Self.at(40, hours: -1), end: Self.at(30, hours: 1).addingTimeInterval(1)))
        #expect(plan.first.start == plan.unreachable?.end)
        let production = try #require(NotificationHistoryPlan.make(watermark: Self.at(40), unfinished: nil, firstSince: nil, now: Self.now, sandbox: false))
        #expect(production.unreachable == nil && production.first.start == Self.at(40, hours: -1))
    }

    @Test func aSliceLeftHalfwayIsTakenUpWithItsTokenWhileAppleServesIt() throws {
        let kept = NotificationHistorySlice(start: Self.at(20), end: Self.at(19))
        let plan = try #require(NotificationHistoryPlan.make(
            watermark: Self.at(20, hours: 1), unfinished: (kept, "n-40"), firstSince: nil, now: Self.now, sandbox: false))
        #expect(plan.first == kept && plan.resumeToken == "n-40")
        // The next slice reads the last hour of the kept one again: its first pages were read a night ago.
        #expect(plan.slice(after: kept) == NotificationHistorySlice(start: Self.at(19, hours: -1), end: Self.at(18, hours: -1)))
        // The same slice in the sandbox, 20 days on: no longer served whole; read again from where it is, without the token.
        let old = NotificationHistorySlice(start: Self.at(35), end: Self.at(34))
        let late = try #require(NotificationHistoryPlan.make(watermark: nil, unfinished: (old, "n-40"), firstSince: nil, now: Self.now, sandbox: true))
        #expect(late.resumeToken == nil && late.unreachable?.start == Self.at(35) && late.first.start == late.unreachable?.end)
    }

    /// A backlog at Apple's limit: the first night starts at the limit (less its margin), finishes
    /// a slice and stops inside the next; the next night, a day and some seconds later, that kept
    /// slice is a day older against the limit and is still taken up at its token, not begun again.
    @Test func aSliceKeptAtTheLimitIsTakenUpTheNextNight() throws {
        let first = try #require(NotificationHistoryPlan.make(watermark: Self.at(200), unfinished: nil, firstSince: nil, now: Self.now, sandbox: false))
        #expect(first.first.start == Self.at(180, hours: 1).addingTimeInterval(1))
        let kept = try #require(first.slice(after: first.first))
        let later = Self.now.addingTimeInterval(Self.day + 30)
        let plan = try #require(NotificationHistoryPlan.make(
            watermark: first.first.end, unfinished: (kept, "t"), firstSince: nil, now: later, sandbox: false))
        #expect(plan.resumeToken == "t" && plan.first == kept && plan.unreachable == nil)
    }

    @Test func nothingToReadWhenTheWatermarkIsAtTheRunsStart() {
        #expect(NotificationHistoryPlan.make(watermark: Self.now.addingTimeInterval(3600), unfinished: nil, firstSince: nil, now: Self.now, sandbox: false) == nil)
    }
}

extension Date {
    /// Down to a whole second, as the plan's slices.
    fileprivate var rounded: Date { Date(timeIntervalSince1970: timeIntervalSince1970.rounded(.down)) }
}
