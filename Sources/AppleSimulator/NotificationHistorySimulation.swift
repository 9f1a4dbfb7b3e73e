import Foundation
import Hashing
import Locking

extension AppleSimulator {
    /// Get Notification History: the scenario's signed notifications of this host whose signedDate
    /// falls in [startDate, endDate), oldest first, in pages (`paginationToken`), within the quota.
    /// As Apple: a startDate past what it keeps (180 days, 30 in the sandbox) is 4000012, a
    /// startDate not before the endDate 4000013, a token it does not know 4000014.
    func notificationHistory(environment: String, token: String?, body: [UInt8]) -> SimulatedReply {
        guard let request = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let start = (request["startDate"] as? NSNumber)?.int64Value, let end = (request["endDate"] as? NSNumber)?.int64Value
        else { return Self.apiError(400, 4000000, "Invalid request: startDate and endDate are required.") }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let keptDays: Int64 = environment == "Sandbox" ? 30 : 180
        guard now - start <= keptDays * 86_400_000 else {
            return Self.apiError(400, 4000012, "Invalid request: the start date is earlier than \(keptDays) days back.")
        }
        guard start < end else { return Self.apiError(400, 4000013, "Invalid request: the start date is not before the end date.") }
        if let retryAfter = apiTraffic.admit("notification-history", environment: environment) {
            return Self.rateLimited(retryAfter: retryAfter)
        }
        if let fault = randomHistoryFault(hasToken: token != nil) { return fault }
        let type = request["notificationType"] as? String  // Apple's filter: this type only
        let matching = apiNotifications.filter {
            $0.environment == environment && $0.signedDate >= start && $0.signedDate < end && (type == nil || $0.notificationType == type)
        }
        var offset = 0
        if let token {
            guard token.hasPrefix("n-"), let parsed = Int(token.dropFirst(2)), parsed >= 0, parsed <= matching.count else {
                return Self.apiError(400, 4000014, "Invalid request: the pagination token is invalid.")
            }
            offset = parsed
        }
        let page = matching.dropFirst(offset).prefix(scenario.apiNotificationPageSize)
        let next = offset + page.count
        var answer: [String: Any] = [
            "hasMore": next < matching.count,
            "notificationHistory": page.map { ["signedPayload": $0.signedPayload, "sendAttempts": [["attemptDate": $0.signedDate, "sendAttemptResult": "SUCCESS"]]] },
        ]
        if next < matching.count { answer["paginationToken"] = "n-\(next)" }
        return .respond(status: 200, body: Self.json(answer))
    }

    /// One draw of `api.notification_history_faults`: nil, or Apple's 500, a 429 until the next
    /// night, or (for a request with a token) the token expired.
    private func randomHistoryFault(hasToken: Bool) -> SimulatedReply? {
        guard let faults = scenario.notificationHistoryFaults else { return nil }
        let (draw, kind) = historyFaultDraws.withLock { ($0.next(), $0.next() % 3) }
        guard Double(draw % 1_000_000) / 1_000_000 < faults.rate else { return nil }
        switch kind {
        case 0: return Self.apiError(500, 5000000, "An unknown error occurred.")
        case 1: return Self.rateLimited(retryAfter: Int64((Date().timeIntervalSince1970 + 3600) * 1000))
        default:
            return hasToken ? Self.apiError(400, 4000017, "Invalid request: the pagination token expired.") : Self.apiError(500, 5000000, "An unknown error occurred.")
        }
    }
}

/// Random faults on Get Notification History, for the property that nothing Apple holds is lost
/// (`api.notification_history_faults`: `{"seed": S, "rate": R}`): each request fails with
/// probability R, as Apple's 500, a 429 whose Retry-After is an hour off, or an expired token.
public struct NotificationHistoryFaults: Sendable {
    public var seed: UInt64
    public var rate: Double

    init(spec: [String: Any]) throws {
        guard let seed = (spec["seed"] as? NSNumber)?.uint64Value, let rate = (spec["rate"] as? NSNumber)?.doubleValue, (0...1).contains(rate) else {
            throw SimulatorError("api.notification_history_faults: {\"seed\": a number, \"rate\": 0 to 1}")
        }
        (self.seed, self.rate) = (seed, rate)
    }
}

extension SimulationScenario {
    /// `api.generated_notifications`: `count` copies of `template` (a notification spec), their
    /// notificationUUIDs numbered (`uuid_prefix`, by default `00000000-0000-4000-9000-`, then the number as 12 digits) and
    /// signedDates spread evenly over [`from_ms`, `until_ms`): a window of tens of thousands of
    /// notifications without a scenario file of that size.
    static func generatedNotifications(_ spec: [String: Any]) throws -> [[UInt8]] {
        guard let count = spec["count"] as? Int, count >= 0, let template = spec["template"] as? [String: Any],
              let from = (spec["from_ms"] as? NSNumber)?.int64Value, let until = (spec["until_ms"] as? NSNumber)?.int64Value, from < until
        else { throw SimulatorError("api.generated_notifications: count, template, from_ms < until_ms") }
        let prefix = spec["uuid_prefix"] as? String ?? "00000000-0000-4000-9000-"
        let step = max(1, (until - from) / Int64(max(count, 1)))
        return try (0..<count).map { index in
            var notification = template
            notification["notificationUUID"] = prefix + String(format: "%012d", index)
            notification["signedDate"] = from + Int64(index) * step
            return Array(try JSONSerialization.data(withJSONObject: notification))
        }
    }
}
