import AppStore
import AppStoreModels
import Foundation
import Logging
import Reconciliation
import Storage

/// Get Notification History as the delta feed: before a run processes the stored notifications,
/// it reads what Apple sent since the last window it read whole, and stores each signed payload as
/// an ingested V2 notification would be (idempotent by notificationUUID). So a notification the
/// app server missed (down, a deploy, a lost request) still reaches the ledger, and its account is
/// verified the same night. The watermark moves only once a window is stored whole.
struct NotificationHistoryFeed: Sendable {
    let client: ServerAPIClient
    let store: NotificationStore
    /// Where the first read starts (`--notification-history-since`).
    let firstSince: Date
    let secretGuard: SharedSecretGuard
    let logger: Logger

    /// Read again before the watermark: Apple may record a notification a little after its time.
    static let overlap: TimeInterval = 3600
    /// Apple answers for the last 180 days.
    static let maximumLookBack: TimeInterval = 180 * 86_400
    /// Pages of one window at most: a `hasMore` that never ends cannot hold the run.
    static let maximumPages = 10_000

    /// Reads [watermark - overlap, now) of `environment`, page after page, storing each page.
    func pull(_ environment: AppleEnvironment, now: Date) async throws -> NotificationHistoryRead {
        let oldest = now.addingTimeInterval(-Self.maximumLookBack + 60)
        let watermark = try await store.notificationHistoryWatermark(environment)
        let start = max(watermark.map { $0.addingTimeInterval(-Self.overlap) } ?? firstSince, oldest)
        var read = NotificationHistoryRead(environment: environment.rawValue, from: start, to: now)
        var token: String?
        for _ in 0..<Self.maximumPages {
            let page = await client.notificationHistory(start: start, end: now, environment: environment, paginationToken: token)
            read.requests += page.requests
            switch page.result {
            case .failure(let failure):
                read.error = Self.describe(failure)
                if case .unauthorized(let reason) = failure { secretGuard.noteUnauthorized(reason) }
                logger.warning("notification_history.incomplete", metadata: [
                    "notification_history.environment": "\(environment.rawValue)", "notification_history.reason": "\(read.error ?? "")",
                ])
                return read
            case .success(let answer):
                read.pages += 1
                read.received += answer.signedPayloads.count
                read.stored += try await store.insert(bodies: answer.signedPayloads.map(Self.body), byUUIDOnly: true)
                guard answer.hasMore else {
                    try await store.advanceNotificationHistoryWatermark(environment, to: now)
                    read.complete = true
                    logger.info("notification_history.read", metadata: [
                        "notification_history.environment": "\(environment.rawValue)", "notification_history.received": "\(read.received)",
                        "notification_history.stored": "\(read.stored)",
                    ])
                    return read
                }
                guard let next = answer.paginationToken, next != token else {
                    read.error = "Apple's notification history says hasMore without a new paginationToken"
                    return read
                }
                token = next
            }
        }
        read.error = "more than \(Self.maximumPages) pages of notification history"
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
