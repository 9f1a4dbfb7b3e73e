import Foundation

/// Where the app's adoption of the job stands (docs/adoption.md, "The first night"): until the
/// app's own access is imported into `iap.entitlements`, the job cannot know what the app gave from
/// its own table, so a first row that grants nothing counts as a revoke (the safety limit counts
/// it, the expiry lag holds it, the run lists it) for every account stored before the first night
/// began. An account stored after that is the job's from its start: its missing row means no
/// access. Recorded facts, so that every shard, retry and night of a first night decides alike.
public struct Adoption: Sendable, Equatable {
    /// When the app's access was imported (`iap.adoption`, set by the documented import).
    public var accessImportedAt: Date?
    /// When the first run that was not a dry run began, on the database's clock.
    public var firstNightStartedAt: Date?

    public init(accessImportedAt: Date?, firstNightStartedAt: Date?) {
        self.accessImportedAt = accessImportedAt
        self.firstNightStartedAt = firstNightStartedAt
    }

    /// Nothing imported: some accounts' first rows may take access the app gave away.
    public var isFirstNight: Bool { accessImportedAt == nil }

    /// Whether a first row that grants nothing, for an account whose first receipt was stored at
    /// `storedAt`, counts as a revoke.
    public func countsFirstRowAsLoss(accountStoredAt storedAt: Date?) -> Bool {
        guard accessImportedAt == nil else { return false }
        guard let started = firstNightStartedAt, let storedAt else { return true }
        return storedAt <= started
    }
}
