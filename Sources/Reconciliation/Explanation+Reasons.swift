import AppStoreModels
import CivilCalendar
import Foundation

/// The lines of `explain`'s "why": the rule that decided, in the words of docs/guarantees.md.
extension Explanation {
    /// Which chain (or purchase) decided, and how each of the others was judged alone: another
    /// chain's refund or expiry never takes away what one chain grants.
    static func chainLines(_ judged: [Entitlement], deciding: Entitlement, type: ProductType) -> [String] {
        let unit = type == .autoRenewable ? "chain" : "purchase"
        func name(_ item: Entitlement) -> String { type == .autoRenewable ? item.originalTransactionId : item.latestTransactionId ?? "?" }
        var lines = ["decided by \(unit) \(name(deciding)) (\(deciding.state.rawValue)), the best of \(judged.count) \(unit)s judged alone"]
        for other in judged where name(other) != name(deciding) {
            let end = other.expiresAt.map { ", expiry \(Timestamp.format($0))" } ?? ""
            let shared = other.ownershipType == "FAMILY_SHARED" ? ", family shared" : ""
            lines.append("  \(unit) \(name(other)): \(other.state.rawValue)\(end)\(shared)")
        }
        return lines
    }

    /// The rule behind a decision, in the words of docs/guarantees.md, "Entitlement rules".
    static func reasons(_ entitlement: Entitlement?, type: ProductType, transactions: [AccountTransaction],
                        renewals: [PendingRenewalInfo], now: Date) -> [String] {
        func time(_ date: Date?) -> String { date.map { Timestamp.format($0) } ?? "never" }
        guard let entitlement else {
            if type == .consumable { return ["consumable: the ledger only, never an entitlement"] }
            return ["no stored transaction of this product: nothing supports an entitlement"]
        }
        let chosen = transactions.first { $0.transaction.transactionId == entitlement.latestTransactionId }?.transaction
        let chains = Set(transactions.map(\.originalTransactionId)).count
        var lines: [String] = []
        switch type {
        case .autoRenewable:
            let inChain = transactions.filter { $0.originalTransactionId == entitlement.originalTransactionId }.count
            lines.append("current transaction \(entitlement.latestTransactionId ?? "?"): the greatest expires_date of the "
                         + "\(inChain) transaction(s) of chain \(entitlement.originalTransactionId)"
                         + (chains > 1 ? " (the product has \(chains) chains, each judged alone)" : ""))
        case .nonConsumable:
            lines.append(entitlement.state == .refunded
                ? "every purchase was cancelled; the latest cancellation is \(entitlement.latestTransactionId ?? "?")"
                : "purchase \(entitlement.latestTransactionId ?? "?"): the latest one that stands (not cancelled)")
        case .nonRenewing:
            lines.append("purchase \(entitlement.latestTransactionId ?? "?"): purchase date + the catalog's duration lasts longest")
        case .consumable:
            break
        }
        let renewal = renewals.first { $0.originalTransactionId == entitlement.originalTransactionId }
        switch entitlement.state {
        case .active:
            lines.append(entitlement.expiresAt.map { "expires \(time($0)), after \(time(now)): active" } ?? "no expiry: active")
        case .gracePeriod:
            lines.append("expired \(time(entitlement.expiresAt)); the renewal info gives a billing grace period until "
                         + "\(time(entitlement.gracePeriodExpiresAt)): still entitled")
        case .billingRetry:
            lines.append("expired \(time(entitlement.expiresAt)); Apple is still trying to bill (is_in_billing_retry_period): not entitled")
        case .expired:
            let renewalNote = renewal == nil ? "no renewal info is stored for chain \(entitlement.originalTransactionId)"
                : "the renewal info gives no grace period in force and no billing retry"
                    + (renewal?.expirationIntent.map { " (expiration intent \($0): \(AppleCodes.expirationIntent($0)))" } ?? "")
            lines.append("expired \(time(entitlement.expiresAt)); \(renewalNote)")
        case .refunded:
            let reason = chosen?.cancellationReason.map { " (reason \($0): \(AppleCodes.cancellationReason($0)))" } ?? ""
            lines.append("cancelled \(time(entitlement.refundedAt))\(reason), not an upgrade: refunded")
        case .upgraded:
            lines.append("ended by an upgrade (is_upgraded)" + (chosen?.cancellationDate.map { ", cancelled \(time($0))" } ?? "")
                         + ": the customer moved to another product of the group")
        }
        if let renewal, entitlement.state != .refunded {
            let autoRenew = renewal.autoRenewStatus.map { $0 ? "on" : "off" } ?? "unknown"
            lines.append("auto-renew \(autoRenew)" + (renewal.autoRenewProductId.map { ", next product \($0)" } ?? ""))
        }
        if entitlement.environment == AppleEnvironment.sandbox.rawValue {
            lines.append("granted from the sandbox (App Review and testers; --sandbox allow)")
        }
        if entitlement.ownershipType == "FAMILY_SHARED" {
            lines.append("family sharing: the purchase belongs to a family member")
        }
        return lines
    }
}
