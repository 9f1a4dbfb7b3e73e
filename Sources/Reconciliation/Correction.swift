import CivilCalendar
import Foundation

/// Where a correction stands (`iap.corrections.status`): planned by a run, then applied, or
/// superseded when the row changed since it was planned (or a later plan replaced it).
public enum CorrectionStatus: String, Sendable, Codable, CaseIterable {
    case planned
    case applied
    case superseded
}

/// One change to `iap.entitlements`, with the reason a person reads in the report.
public struct Correction: Sendable, Equatable {
    /// `iap.corrections.kind`.
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// Not entitled (or no row) before, entitled now.
        case grant
        /// Entitled before, not now; on a first night with nothing imported, also a first row that
        /// grants nothing: it may take away what the app gave from its own table, so the safety
        /// limit counts it (docs/guarantees.md, "Safety limit").
        case revoke
        /// Entitled before and after, expiring later.
        case extend
        /// Entitled before and after, expiring earlier.
        case shorten
        /// Not entitled before and after (a first row that grants nothing, but on a first night),
        /// or entitled with the same expiry: another field changed.
        case update
    }

    public var accountId: String
    public var productId: String
    public var kind: Kind
    public var reason: String
    public var before: Entitlement?
    /// The row as it should be; never nil (a revoke keeps the row, not entitled).
    public var after: Entitlement

    public init(accountId: String, productId: String, kind: Kind, reason: String, before: Entitlement?, after: Entitlement) {
        self.accountId = accountId
        self.productId = productId
        self.kind = kind
        self.reason = reason
        self.before = before
        self.after = after
    }
}

/// Compares computed entitlements with stored ones: pure, one clock.
public struct EntitlementDiff: Sendable {
    /// A revoke for an expiry that passed less than this long ago waits for a later run:
    /// Apple's renewal can show up late.
    public var expiryLag: TimeInterval
    /// The account's first night (`Adoption.countsFirstRowAsLoss`: the app's access never imported,
    /// the account stored before the first night began): with no row the job cannot know what the
    /// app gave from its own table, so a first row that grants nothing is a `revoke`, counted by the
    /// safety limit. Otherwise a missing row means no access, and such a row is an `update`.
    public var isFirstNight: Bool

    public init(expiryLag: TimeInterval = 3600, isFirstNight: Bool = false) {
        self.expiryLag = expiryLag
        self.isFirstNight = isFirstNight
    }

    /// What a diff decided for one account.
    public struct Plan: Sendable, Equatable {
        public var corrections: [Correction]
        /// Revokes held back by the expiry lag (reported, not applied).
        public var heldRevokes: [Correction]
    }

    /// The corrections that turn `stored` into `computed` for one account whose receipts all verified.
    /// `cancellationReasons` (by transaction id) lets a refund's reason say Apple's reason code.
    /// The products in `leftAsStored` (the rules could not type them) are neither granted nor revoked;
    /// `lapsedGraceEnds` (by product) are grace periods Apple says ended, held by the lag like an expiry.
    public func corrections(
        stored: [Entitlement], computed: [Entitlement], now: Date, cancellationReasons: [String: Int] = [:],
        leftAsStored: Set<String> = [], lapsedGraceEnds: [String: Date] = [:]
    ) -> Plan {
        var plan = Plan(corrections: [], heldRevokes: [])
        let storedByProduct = Dictionary(stored.map { ($0.productId, $0) }, uniquingKeysWith: { first, _ in first })
        let computedProducts = Set(computed.map(\.productId))
        for after in computed where !leftAsStored.contains(after.productId) {
            let before = storedByProduct[after.productId]
            guard before != after else { continue }
            let kind = Self.kind(before: before, after: after, isFirstNight: isFirstNight)
            let correction = Correction(
                accountId: after.accountId, productId: after.productId, kind: kind,
                reason: Self.reason(kind: kind, before: before, after: after, cancellationReasons: cancellationReasons),
                before: before, after: after)
            if kind == .revoke, isWithinExpiryLag(after, before: before, lapsedGrace: lapsedGraceEnds[after.productId], now: now) {
                plan.heldRevokes.append(correction)
            } else {
                plan.corrections.append(correction)
            }
        }
        for before in stored.sorted(by: { $0.productId < $1.productId })
        where !computedProducts.contains(before.productId) && !leftAsStored.contains(before.productId) && before.entitled {
            var after = before
            after.state = .expired
            plan.corrections.append(Correction(
                accountId: before.accountId, productId: before.productId, kind: .revoke,
                reason: "no transaction in the account's verified receipts supports this entitlement",
                before: before, after: after))
        }
        return plan
    }

    /// Only expiry-driven revokes wait; refunds and upgrades never do. The end that counts is the
    /// later of the expiry and the grace period the stored row held: a grace period that ended
    /// minutes ago is held like an expiry (Apple's renewal can show up late after either).
    func isWithinExpiryLag(_ after: Entitlement, before: Entitlement? = nil, lapsedGrace: Date? = nil, now: Date) -> Bool {
        guard after.state == .expired || after.state == .billingRetry else { return false }
        let ends = [after.expiresAt, after.gracePeriodExpiresAt, before?.gracePeriodExpiresAt, lapsedGrace].compactMap { $0 }.filter { $0 <= now }
        guard let end = ends.max() else { return false }
        return now.timeIntervalSince(end) < expiryLag
    }

    static func kind(before: Entitlement?, after: Entitlement, isFirstNight: Bool = false) -> Correction.Kind {
        // On a first night no row is not "not entitled": the app may grant from a table of its own.
        if before == nil && isFirstNight && !after.entitled { return .revoke }
        let wasEntitled = before?.entitled ?? false
        switch (wasEntitled, after.entitled) {
        case (false, true): return .grant
        case (true, false): return .revoke
        case (false, false): return .update
        case (true, true):
            // No expiry means it never ends: later than any date.
            let old = before?.expiresAt ?? .distantFuture
            let new = after.expiresAt ?? .distantFuture
            if new > old { return .extend }
            if new < old { return .shorten }
            return .update
        }
    }

    static func reason(
        kind: Correction.Kind, before: Entitlement?, after: Entitlement, cancellationReasons: [String: Int] = [:]
    ) -> String {
        let reason = stateReason(kind: kind, before: before, after: after, cancellationReasons: cancellationReasons)
        return before == nil && !after.entitled ? reason + " (no entitlement was stored)" : reason
    }

    private static func stateReason(
        kind: Correction.Kind, before: Entitlement?, after: Entitlement, cancellationReasons: [String: Int]
    ) -> String {
        let day = Timestamp.day
        switch after.state {
        case .refunded:
            let when = after.refundedAt.map { " on \(day($0))" } ?? ""
            let code = after.latestTransactionId.flatMap { cancellationReasons[$0] }.map { ", reason \($0)" } ?? ""
            return "refund\(when)\(code)"
        case .upgraded:
            let target = after.autoRenewProductId.map { " to \($0)" } ?? ""
            return "upgraded\(target); transaction \(after.latestTransactionId ?? "?") cancelled by the upgrade"
        case .gracePeriod:
            return "billing grace period until \(after.gracePeriodExpiresAt.map(day) ?? "?")"
        case .billingRetry:
            return "expired on \(after.expiresAt.map(day) ?? "?"); Apple is retrying billing"
        case .expired:
            return "expired on \(after.expiresAt.map(day) ?? "?")"
                + (after.autoRenew == false ? "; auto-renew is off" : "")
        case .active:
            break
        }
        switch kind {
        case .grant:
            if let before {
                return "entitled again (was \(before.state.rawValue))" + (after.expiresAt.map { ": expires \(day($0))" } ?? "")
            }
            let sandbox = after.environment == "Sandbox" ? " (sandbox)" : ""
            return "purchase found\(sandbox)" + (after.expiresAt.map { ": expires \(day($0))" } ?? ": no expiry")
        case .extend:
            return "renewed: expiry \(before?.expiresAt.map(day) ?? "?") -> \(after.expiresAt.map(day) ?? "never")"
        case .shorten:
            return "expiry moved earlier: \(before?.expiresAt.map(day) ?? "never") -> \(after.expiresAt.map(day) ?? "?")"
        case .update, .revoke:
            return "details changed: " + changedFields(before: before, after: after).joined(separator: ", ")
        }
    }

    static func changedFields(before: Entitlement?, after: Entitlement) -> [String] {
        guard let before else { return ["new row"] }
        var fields: [String] = []
        if before.originalTransactionId != after.originalTransactionId { fields.append("original_transaction_id") }
        if before.latestTransactionId != after.latestTransactionId { fields.append("latest_transaction_id") }
        if before.state != after.state { fields.append("state \(before.state.rawValue) -> \(after.state.rawValue)") }
        if before.expiresAt != after.expiresAt { fields.append("expires_at") }
        if before.gracePeriodExpiresAt != after.gracePeriodExpiresAt { fields.append("grace_period_expires_at") }
        if before.autoRenew != after.autoRenew {
            fields.append("auto_renew \(before.autoRenew.map(String.init) ?? "null") -> \(after.autoRenew.map(String.init) ?? "null")")
        }
        if before.autoRenewProductId != after.autoRenewProductId { fields.append("auto_renew_product_id") }
        if before.environment != after.environment { fields.append("environment") }
        if before.ownershipType != after.ownershipType { fields.append("ownership_type") }
        if before.refundedAt != after.refundedAt { fields.append("refunded_at") }
        return fields
    }
}
