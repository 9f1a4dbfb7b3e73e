import Foundation

/// One request window of Get Notification History: [start, end), whole seconds, so that the
/// milliseconds sent to Apple are the same when a stored slice is read again with its
/// `paginationToken`.
public struct NotificationHistorySlice: Sendable, Equatable, Codable {
    public var start: Date
    public var end: Date

    public init(start: Date, end: Date) {
        self.start = start
        self.end = end
    }
}

/// Where a run reads Get Notification History, and in which slices (docs/notifications.md,
/// "Notification history: the delta feed"). The watermark moves at the end of each slice stored
/// whole, and a slice left halfway is taken up again at its `paginationToken`: a window too large
/// for one run's budget is finished over several, never begun again from its first page.
public struct NotificationHistoryPlan: Sendable, Equatable {
    /// The first slice to read, and the token to read it from when a run left it halfway.
    public var first: NotificationHistorySlice
    public var resumeToken: String?
    /// Notifications Apple no longer serves that the watermark had not reached: [from, until).
    public var unreachable: NotificationHistorySlice?
    /// Where the last slice ends: the run's start.
    public var end: Date
    public var sliceLength: TimeInterval

    /// Read again before the watermark: Apple may record a notification a little after its time.
    public static let overlap: TimeInterval = 3600
    /// How far back Apple answers: 180 days in production, 30 in the sandbox (Apple's
    /// NotificationHistoryRequest). A start older than that is refused (4000012).
    public static func servedFor(sandbox: Bool) -> TimeInterval { (sandbox ? 30 : 180) * 86_400 }
    /// Kept off Apple's limit, so that a request made a little later than planned, or a clock a
    /// little off Apple's, is not refused.
    public static let limitMargin: TimeInterval = 3600
    /// A kept slice is taken up at its token while its start is this far inside Apple's limit: a
    /// catch-up begun at the margin, a day older the next night, must still be taken up, or a
    /// backlog at the limit would lose its token every night and never catch up.
    public static let resumeMargin: TimeInterval = 600
    /// The first read without `--notification-history-since`.
    public static let firstLookBack: TimeInterval = 30 * 86_400
    public static let defaultSliceLength: TimeInterval = 86_400

    /// The plan from what is stored: `watermark`, where the last slice stored whole ended;
    /// `unfinished`, a slice a run left halfway with its token; `firstSince`, the operator's
    /// start for a first read. Nil when there is nothing to read (the watermark is at `now`).
    public static func make(
        watermark: Date?, unfinished: (slice: NotificationHistorySlice, token: String)?, firstSince: Date?, now: Date, sandbox: Bool,
        sliceLength: TimeInterval = defaultSliceLength
    ) -> NotificationHistoryPlan? {
        let end = Self.second(now, up: false)
        let oldest = Self.second(now.addingTimeInterval(-servedFor(sandbox: sandbox) + limitMargin), up: true)
        let length = max(1, sliceLength.rounded(.down))
        let served = now.addingTimeInterval(-servedFor(sandbox: sandbox) + resumeMargin)
        if let unfinished, unfinished.slice.start >= served, unfinished.slice.end <= end, unfinished.slice.start < unfinished.slice.end {
            return NotificationHistoryPlan(first: unfinished.slice, resumeToken: unfinished.token, unreachable: nil, end: end, sliceLength: length)
        }
        // A slice left halfway that Apple no longer serves whole is read again from where it can be.
        let wanted = [watermark.map { $0.addingTimeInterval(-overlap) }, unfinished?.slice.start].compactMap { $0 }.min()
            ?? firstSince ?? max(now.addingTimeInterval(-firstLookBack), oldest)
        let start = max(Self.second(wanted, up: false), oldest)
        guard start < end else { return nil }
        return NotificationHistoryPlan(
            first: Self.slice(from: start, length: length, end: end), resumeToken: nil,
            unreachable: wanted < oldest ? NotificationHistorySlice(start: wanted, end: oldest) : nil, end: end, sliceLength: length)
    }

    /// The slice after `slice`, or nil when `slice` reached the run's start. After a slice taken
    /// up at its token, the next starts the overlap before its end: what Apple recorded late into
    /// the pages an earlier run read is read again, as after any watermark.
    public func slice(after slice: NotificationHistorySlice) -> NotificationHistorySlice? {
        guard slice.end < end else { return nil }
        let start = resumeToken != nil && slice == first ? max(slice.start, slice.end.addingTimeInterval(-Self.overlap)) : slice.end
        return Self.slice(from: start, length: sliceLength, end: end)
    }

    /// A slice of `length` from `start`, stretched to `end` when less than a quarter of a slice would
    /// be left after it: a night's window (a day and the overlap) is one request, not two.
    static func slice(from start: Date, length: TimeInterval, end: Date) -> NotificationHistorySlice {
        let stop = start.addingTimeInterval(length)
        return NotificationHistorySlice(start: start, end: end.timeIntervalSince(stop) < length / 4 ? end : stop)
    }

    /// `date` on a whole second, down or up.
    static func second(_ date: Date, up: Bool) -> Date {
        let seconds = date.timeIntervalSince1970
        return Date(timeIntervalSince1970: up ? seconds.rounded(.up) : seconds.rounded(.down))
    }
}
