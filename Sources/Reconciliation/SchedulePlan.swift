import AppStoreModels
import CivilCalendar
import Foundation

/// Why a rolling run takes an account tonight, in the order it takes them.
public enum ScheduleReason: String, Sendable, Codable, CaseIterable, CodingKeyRepresentable {
    /// A server notification (stored, or read from notification history) asked to re-verify it.
    case notified
    /// Money may move soon: an expiry within the expiry lag plus a day, a billing grace period, a
    /// billing retry, or a refund in the ledger that the entitlement does not show yet.
    case atRisk = "at_risk"
    /// Not verified within `--full-cycle` (or never): the rest, oldest verification first.
    case cycle
}

/// A rolling run's plan (issue 28): which accounts are due and why, how many fit the window at the
/// API budget, what that costs per endpoint, and when the full cycle completes. The arithmetic is
/// here, pure; the counts come from the database.
public struct SchedulePlan: Sendable, Codable, Equatable {
    /// Accounts due by reason, before the window cut them.
    public var due: [ScheduleReason: Int]
    /// Accounts taken tonight by reason.
    public var scheduled: [ScheduleReason: Int]
    /// `--window`, when given; nil takes every due account.
    public var windowSeconds: Double?
    /// Accounts the window holds at the budget; nil without a window.
    public var capacity: Int?
    /// Requests an account costs on each endpoint (`history`, `statuses`): the last completed
    /// run's average, else a first guess.
    public var requestsPerAccount: [ServerAPIEndpoint: Double]
    /// The job's budget on each endpoint, requests a second.
    public var budgetPerSecond: [ServerAPIEndpoint: Double]
    /// `--full-cycle`: every account is verified at least once in this long.
    public var fullCycleSeconds: Double
    public var plannedAt: Date

    public init(due: [ScheduleReason: Int], scheduled: [ScheduleReason: Int], windowSeconds: Double?, capacity: Int?,
                requestsPerAccount: [ServerAPIEndpoint: Double], budgetPerSecond: [ServerAPIEndpoint: Double], fullCycleSeconds: Double, plannedAt: Date) {
        self.due = due
        self.scheduled = scheduled
        self.windowSeconds = windowSeconds
        self.capacity = capacity
        self.requestsPerAccount = requestsPerAccount
        self.budgetPerSecond = budgetPerSecond
        self.fullCycleSeconds = fullCycleSeconds
        self.plannedAt = plannedAt
    }

    /// A first guess before any run measured it: history once per account, a few a second page or
    /// a second Apple ID; statuses for the subscribers.
    public static let firstGuess: [ServerAPIEndpoint: Double] = [.history: 1.1, .statuses: 0.9]

    /// How many accounts fit `window` seconds: the endpoint that runs out first decides.
    public static func capacity(windowSeconds: Double, budgetPerSecond: [ServerAPIEndpoint: Double], requestsPerAccount: [ServerAPIEndpoint: Double]) -> Int {
        let limits = requestsPerAccount.compactMap { endpoint, perAccount -> Double? in
            guard perAccount > 0, let budget = budgetPerSecond[endpoint] else { return nil }
            return budget * windowSeconds / perAccount
        }
        return max(0, Int((limits.min() ?? .infinity).rounded(.down).clamped(to: 0...Double(Int32.max))))
    }

    public var totalDue: Int { due.values.reduce(0, +) }
    public var totalScheduled: Int { scheduled.values.reduce(0, +) }
    /// Due accounts left for the next night.
    public var leftForNextNight: Int { totalDue - totalScheduled }

    /// Requests tonight's accounts will cost on each endpoint.
    public var estimatedRequests: [ServerAPIEndpoint: Int] {
        requestsPerAccount.mapValues { Int((Double(totalScheduled) * $0).rounded(.up)) }
    }

    /// Seconds tonight's accounts take at the budget: the slowest endpoint's.
    public var estimatedSeconds: Double {
        estimatedRequests.compactMap { endpoint, requests in budgetPerSecond[endpoint].map { $0 > 0 ? Double(requests) / $0 : 0 } }.max() ?? 0
    }

    /// When the accounts of the cycle left tonight will all have been verified, a night at a
    /// time, each night's capacity less what tonight's notified and at-risk accounts took; nil
    /// when nothing of the cycle is left (it completes tonight) or no night has room for it.
    public var fullCycleCompleteBy: Date? {
        let left = (due[.cycle] ?? 0) - (scheduled[.cycle] ?? 0)
        guard left > 0 else { return nil }
        guard let capacity else { return nil }
        let perNight = capacity - (scheduled[.notified] ?? 0) - (scheduled[.atRisk] ?? 0)
        guard perNight > 0 else { return nil }
        let nights = (left + perNight - 1) / perNight
        return plannedAt.addingTimeInterval(Double(nights) * 86_400)
    }

    /// The plan in lines, as `run --dry-run` prints it before anything is asked.
    public var lines: [String] {
        func count(_ reason: ScheduleReason) -> String { "\(scheduled[reason] ?? 0) of \(due[reason] ?? 0)" }
        var lines = [
            "Plan: \(totalScheduled) of \(totalDue) due accounts tonight"
                + (windowSeconds.map { " (the window of \(Self.duration($0)) holds \(capacity ?? 0) at the budget)" } ?? ""),
            "  by reason: notified \(count(.notified)), at risk \(count(.atRisk)), full cycle \(count(.cycle))",
            "  App Store Server API requests: " + estimatedRequests.sorted { $0.key.rawValue < $1.key.rawValue }.map { endpoint, requests in
                "\(endpoint.rawValue) ~\(requests) (\(String(format: "%.2f", requestsPerAccount[endpoint] ?? 0)) an account, "
                    + "budget \(String(format: "%.2f", budgetPerSecond[endpoint] ?? 0))/s)"
            }.joined(separator: ", "),
            "  time at the budget: \(Self.duration(estimatedSeconds))",
        ]
        if leftForNextNight > 0 {
            lines.append("  left for the next night: \(leftForNextNight)"
                + (fullCycleCompleteBy.map { "; the full cycle (\(Self.duration(fullCycleSeconds))) completes by \(Timestamp.day($0))" }
                    ?? "; the window holds no account of the full cycle after the notified and at-risk ones: widen --window or raise the budget"))
        }
        return lines
    }

    /// `4h 10m`, `35m`, `12s`.
    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        let (days, hours, minutes) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60)
        if days > 0 { return "\(days)d" + (hours > 0 ? " \(hours)h" : "") }
        if hours > 0 { return "\(hours)h" + (minutes > 0 ? " \(minutes)m" : "") }
        if minutes > 0 { return "\(minutes)m" }
        return "\(total)s"
    }
}

extension Comparable {
    func clamped(to range: ClosedRange<Self>) -> Self { min(max(self, range.lowerBound), range.upperBound) }
}
