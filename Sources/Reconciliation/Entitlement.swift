import Foundation

/// What a product is, from the catalog (`iap.products.type`).
public enum ProductType: String, Sendable, Codable, CaseIterable {
    case autoRenewable = "auto_renewable"
    case nonConsumable = "non_consumable"
    case consumable
    case nonRenewing = "non_renewing"
}

/// One catalog row (`iap.products`).
public struct Product: Sendable, Equatable {
    public var productId: String
    public var type: ProductType
    /// For non-renewing subscriptions: how long a purchase lasts.
    public var duration: CalendarDuration?
    public var entitlement: String?
    public var price: Decimal?
    public var currency: String?
    /// For non-renewing subscriptions: whether a pass bought while another runs starts when that
    /// one ends (`iap.products.passes_stack`); by default passes overlap and do not stack.
    public var passesStack: Bool

    public init(productId: String, type: ProductType, duration: CalendarDuration? = nil, entitlement: String? = nil,
                price: Decimal? = nil, currency: String? = nil, passesStack: Bool = false) {
        self.productId = productId
        self.type = type
        self.duration = duration
        self.entitlement = entitlement
        self.price = price
        self.currency = currency
        self.passesStack = passesStack
    }
}

/// A length of time as the catalog states it: months and days are calendar units (in UTC), so
/// "1 month" bought on 31 January ends on 28 or 29 February, as PostgreSQL would compute it.
public struct CalendarDuration: Sendable, Equatable, Hashable {
    public var months: Int
    public var days: Int
    public var seconds: Double

    public init(months: Int = 0, days: Int = 0, seconds: Double = 0) {
        self.months = months
        self.days = days
        self.seconds = seconds
    }

    public func added(to date: Date) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var result = date
        if months != 0 { result = calendar.date(byAdding: .month, value: months, to: result) ?? result }
        if days != 0 { result = calendar.date(byAdding: .day, value: days, to: result) ?? result }
        return result.addingTimeInterval(seconds)
    }
}

/// The state of one (account, product) entitlement, as `iap.entitlements.state` spells it.
public enum EntitlementState: String, Sendable, Codable, CaseIterable {
    case active
    case gracePeriod = "grace_period"
    case billingRetry = "billing_retry"
    case expired
    case refunded
    case upgraded

    /// True exactly for `active` and `grace_period`.
    public var isEntitled: Bool { self == .active || self == .gracePeriod }
}

/// One row of `iap.entitlements`, without its bookkeeping `updated_at`.
public struct Entitlement: Sendable, Equatable {
    public var accountId: String
    public var productId: String
    public var originalTransactionId: String
    public var latestTransactionId: String?
    public var state: EntitlementState
    public var expiresAt: Date?
    public var gracePeriodExpiresAt: Date?
    public var autoRenew: Bool?
    public var autoRenewProductId: String?
    /// `Production` or `Sandbox`.
    public var environment: String?
    /// `PURCHASED` or `FAMILY_SHARED`.
    public var ownershipType: String?
    public var refundedAt: Date?

    public var entitled: Bool { state.isEntitled }

    public init(
        accountId: String, productId: String, originalTransactionId: String, latestTransactionId: String? = nil,
        state: EntitlementState, expiresAt: Date? = nil, gracePeriodExpiresAt: Date? = nil, autoRenew: Bool? = nil,
        autoRenewProductId: String? = nil, environment: String? = nil, ownershipType: String? = nil, refundedAt: Date? = nil
    ) {
        self.accountId = accountId
        self.productId = productId
        self.originalTransactionId = originalTransactionId
        self.latestTransactionId = latestTransactionId
        self.state = state
        self.expiresAt = expiresAt
        self.gracePeriodExpiresAt = gracePeriodExpiresAt
        self.autoRenew = autoRenew
        self.autoRenewProductId = autoRenewProductId
        self.environment = environment
        self.ownershipType = ownershipType
        self.refundedAt = refundedAt
    }
}
