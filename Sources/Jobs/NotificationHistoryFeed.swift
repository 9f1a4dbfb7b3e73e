import AppStore
import AppStoreModels
import CivilCalendar
import Foundation
import Logging
import Reconciliation
import Storage

/// Get Notification History as the delta feed: before a run processes the stored notifications,
/// it reads what Apple sent since the watermark, and stores each signed payload as an ingested V2
/// notification would be (idempotent by notificationUUID). So a notification the app server missed
/// (down, a deploy, a lost request) still reaches the ledger, and its account is verified the same
/// night. The window is read in slices (`NotificationHistoryPlan`): the watermark moves at the end of
/// each slice stored whole, and where a run stops inside one is kept with Apple's paginationToken,
/// so a window larger than a night's budget is finished over several nights.
struct NotificationHistoryFeed: Sendable {
    let client: ServerAPIClient
    let store: NotificationStore
    /// Where the first read starts (`--notification-history-since`); nil: 30 days back.
    let firstSince: Date?
    let secretGuard: SharedSecretGuard
    let logger: Logger
    var sliceLength = NotificationHistoryPlan.defaultSliceLength
    /// The tests' kill: called when a page has come (`.received`) and once it is stored, before
    /// where the read stands is kept (`.stored`). A throw leaves the database as a death there would.
    var mayDie: (@Sendable (PageStep) throws -> Void)?
    enum PageStep: Sendable { case received, stored }

    /// Pages of one run at most: a `hasMore` that never ends cannot hold the run.
    static let maximumPages = 10_000
    /// Apple's errors for a paginationToken it no longer takes (invalid, expired): the slice is read again from its start.
    static let refusedTokenCodes: Set<Int> = [4000014, 4000017]
    /// Apple's error for a startDate past what it serves.
    static let startTooFarInPast = 4000012

    /// Reads `environment` from where it stands to `now`, slice after slice, page after page,
    /// storing each page and then where the read stands.
    func pull(_ environment: AppleEnvironment, now: Date) async throws -> NotificationHistoryRead {
        let progress = try await withDatabaseRetry(logger: logger) { try await store.notificationHistoryProgress(environment) }
        guard let plan = NotificationHistoryPlan.make(
            watermark: progress.watermark, unfinished: progress.unfinished, firstSince: firstSince, now: now,
            sandbox: environment == .sandbox, sliceLength: sliceLength)
        else {
            var read = NotificationHistoryRead(environment: environment.rawValue, from: now, to: now)
            (read.complete, read.readUntil) = (true, progress.watermark)
            return read
        }
        var read = NotificationHistoryRead(environment: environment.rawValue, from: plan.first.start, to: plan.end)
        (read.readUntil, read.resumed) = (progress.watermark, plan.resumeToken != nil)
        if let gap = plan.unreachable {
            (read.unreachableFrom, read.unreachableUntil) = (gap.start, gap.end)
            logger.warning("notification_history.unreachable", metadata: [
                "notification_history.environment": "\(environment.rawValue)", "notification_history.from": "\(Timestamp.format(gap.start))",
                "notification_history.until": "\(Timestamp.format(gap.end))",
                "notification_history.days": "\(String(format: "%.1f", gap.end.timeIntervalSince(gap.start) / 86_400))",
            ])
        }
        var slice = plan.first
        var token = plan.resumeToken
        var refusedTokenOnce = false
        for _ in 0..<Self.maximumPages {
            let page = await client.notificationHistory(start: slice.start, end: slice.end, environment: environment, paginationToken: token)
            read.requests += page.requests
            switch page.result {
            case .failure(.failed(_, let code?, _)) where token != nil && Self.refusedTokenCodes.contains(code) && !refusedTokenOnce:
                // Apple no longer takes the token a run kept: the slice again from its first page.
                refusedTokenOnce = true
                token = nil
                try await withDatabaseRetry(logger: logger) { [slice] in try await store.keepNotificationHistorySlice(environment, slice, token: nil) }
                logger.notice("notification_history.token_refused", metadata: [
                    "notification_history.environment": "\(environment.rawValue)", "notification_history.code": .stringConvertible(code),
                ])
            case .failure(let failure):
                read.error = Self.describe(failure)
                if case .unauthorized(let reason) = failure { secretGuard.noteUnauthorized(reason) }
                if case .failed(_, Self.startTooFarInPast?, _) = failure {
                    // Apple's limit is nearer than documented: what was kept of this slice is of no use now.
                    try await withDatabaseRetry(logger: logger) { [slice] in try await store.keepNotificationHistorySlice(environment, slice, token: nil) }
                    read.error = "Apple no longer serves notifications from \(Timestamp.format(slice.start)) (4000012): " + (read.error ?? "")
                }
                logger.warning("notification_history.incomplete", metadata: [
                    "notification_history.environment": "\(environment.rawValue)", "notification_history.reason": "\(read.error ?? "")",
                    "notification_history.read_until": "\(read.readUntil.map { Timestamp.format($0) } ?? "none")",
                ])
                return read
            case .success(let answer):
                read.pages += 1
                read.received += answer.signedPayloads.count
                try mayDie?(.received)
                let bodies = answer.signedPayloads.map(Self.body)
                read.stored += try await withDatabaseRetry(logger: logger) { try await store.insert(bodies: bodies, byUUIDOnly: true) }
                try mayDie?(.stored)
                if answer.hasMore {
                    guard let next = answer.paginationToken, next != token else {
                        read.error = "Apple's notification history says hasMore without a new paginationToken"
                        return read
                    }
                    token = next
                    try await withDatabaseRetry(logger: logger) { [slice] in try await store.keepNotificationHistorySlice(environment, slice, token: next) }
                    continue
                }
                try await withDatabaseRetry(logger: logger) { [slice] in try await store.finishNotificationHistorySlice(environment, slice) }
                (read.slices, read.readUntil) = (read.slices + 1, slice.end)
                guard let following = plan.slice(after: slice) else {
                    read.complete = true
                    logger.info("notification_history.read", metadata: [
                        "notification_history.environment": "\(environment.rawValue)", "notification_history.received": .stringConvertible(read.received),
                        "notification_history.stored": .stringConvertible(read.stored), "notification_history.slices": .stringConvertible(read.slices),
                    ])
                    return read
                }
                (slice, token, refusedTokenOnce) = (following, nil, false)
            }
        }
        read.error = "more than \(Self.maximumPages) pages of notification history in one run: the next run goes on from here"
        return read
    }

    /// The body Apple posts to the app server: what `ingest-notifications` would store.
    static func body(_ signedPayload: String) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: ["signedPayload": signedPayload], options: [.withoutEscapingSlashes])) ?? Data(),
               as: UTF8.self)
    }

    static func describe(_ failure: ServerAPIClient.Failure) -> String {
        switch failure {
        case .deferred(let reason), .unauthorized(let reason), .failed(_, _, let reason): reason
        case .notSent(let reason): "not sent: " + reason
        }
    }
}
