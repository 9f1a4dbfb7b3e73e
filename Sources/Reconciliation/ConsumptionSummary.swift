import CivilCalendar
import Foundation

/// What one `answer-consumption-requests` did (docs/consumption.md, "What it says"): printed at
/// its end, logged, and written as Prometheus metrics for the alert rules.
public struct ConsumptionSummary: Sendable, Equatable {
    /// Stored V2 notifications verified and examined.
    public var examined = 0
    /// Of those, the ones that did not verify: nothing of them is trusted, nothing sent.
    public var rejected = 0
    /// CONSUMPTION_REQUESTs found among them (each recorded, with its decision).
    public var requests = 0
    /// Notifications stored from Get Notification History (CONSUMPTION_REQUEST only).
    public var fromHistory = 0
    /// How this run's requests and answers ended, by outcome (`pending` counts those left for the next run).
    public var outcomes: [ConsumptionOutcome: Int] = [:]
    /// Of the `no_consent` outcomes, why: several holders without every consent among them.
    public var missingConsent: [MissingConsent: Int] = [:]
    /// Requests left `unmatched` or without consent by an earlier run that this one decided otherwise.
    public var rematched = 0
    /// The oldest request still waiting for its answer to leave, when the run ended.
    public var oldestOpenRequest: Date?
    /// What went wrong that did not stop the run (notification history unreadable, for instance).
    public var warnings: [String] = []
    /// Where Apple could not be asked (its history unread, an answer it never took after this
    /// run's attempts: a timeout, a 5xx): the command then exits 1, so a scheduler sees it.
    public var appleUnreachable: [String] = []
    public var dryRun = false
    public var finishedAt = Date()

    public init() {}

    /// Counts one decision (a body to send only when asked: it is counted when it leaves).
    public mutating func count(_ decision: ConsumptionDecision, countPending: Bool) {
        if case .noConsent(let missing, _) = decision { missingConsent[missing, default: 0] += 1 }
        guard countPending || decision.outcome != .pending else { return }
        outcomes[decision.outcome, default: 0] += 1
    }

    /// Seconds the oldest open request has waited; 0 when none waits.
    public var oldestOpenAge: TimeInterval {
        oldestOpenRequest.map { max(0, finishedAt.timeIntervalSince($0)) } ?? 0
    }

    /// The lines printed at the end.
    public var text: String {
        var lines = [
            "Consumption requests\(dryRun ? " (dry run: nothing sent, nothing recorded)" : ""):",
            "  notifications examined: \(examined) (not verified: \(rejected)), requests found: \(requests)",
        ]
        if fromHistory > 0 { lines.append("  stored from Apple's notification history: \(fromHistory)") }
        let counted = ConsumptionOutcome.allCases.compactMap { outcome in outcomes[outcome].map { "\(outcome.rawValue) \($0)" } }
        lines.append("  outcomes: " + (counted.isEmpty ? "none" : counted.joined(separator: ", ")))
        let lacking = MissingConsent.allCases.compactMap { missing in missingConsent[missing].map { "\(missing.rawValue) \($0)" } }
        if !lacking.isEmpty { lines.append("  no consent, why: " + lacking.joined(separator: ", ")) }
        if rematched > 0 { lines.append("  requests decided anew since an earlier run (matched, or consent given): \(rematched)") }
        if let oldest = oldestOpenRequest {
            lines.append("  oldest unanswered request: \(Int(oldestOpenAge / 60)) min old (asked at \(Timestamp.format(oldest)))")
        } else {
            lines.append("  oldest unanswered request: none")
        }
        lines += warnings.map { "  warning: " + $0 }
        if !appleUnreachable.isEmpty {
            lines.append("  Apple could not be asked \(appleUnreachable.count) time(s): the command exits 1; what is left is tried again next run")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Prometheus text for node_exporter's textfile collector (cron/receipt-reconciler-alerts.yml).
    public var metrics: String {
        var lines = [
            "# HELP receipt_reconciler_consumption_answers How the last answer-consumption-requests run's requests ended, by outcome.",
            "# TYPE receipt_reconciler_consumption_answers gauge",
        ]
        for outcome in ConsumptionOutcome.allCases {
            lines.append("receipt_reconciler_consumption_answers{outcome=\"\(outcome.rawValue)\"} \(outcomes[outcome] ?? 0)")
        }
        lines += [
            "# HELP receipt_reconciler_consumption_oldest_unanswered_seconds Age of the oldest CONSUMPTION_REQUEST whose answer has not left (0: none).",
            "# TYPE receipt_reconciler_consumption_oldest_unanswered_seconds gauge",
            "receipt_reconciler_consumption_oldest_unanswered_seconds \(Int(oldestOpenAge))",
            "# HELP receipt_reconciler_consumption_last_run_timestamp_seconds When answer-consumption-requests last finished.",
            "# TYPE receipt_reconciler_consumption_last_run_timestamp_seconds gauge",
            "receipt_reconciler_consumption_last_run_timestamp_seconds \(Int(finishedAt.timeIntervalSince1970))",
            "# HELP receipt_reconciler_consumption_apple_unreachable Times the last answer-consumption-requests run could not ask Apple (its history unread, an answer Apple never took): it exited 1.",
            "# TYPE receipt_reconciler_consumption_apple_unreachable gauge",
            "receipt_reconciler_consumption_apple_unreachable \(appleUnreachable.count)",
        ]
        return lines.joined(separator: "\n") + "\n"
    }
}
