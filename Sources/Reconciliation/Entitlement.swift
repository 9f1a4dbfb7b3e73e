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

    public init(productId: String, type: ProductType, duration: CalendarDuration? = nil, entitlement: String? = nil,
                price: Decimal? = nil, currency: String? = nil) {
        self.productId = productId
        self.type = type
        self.duration = duration
        self.entitlement = entitlement
        self.price = price
        self.currency = currency
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
public struct Entitlement: Sendable, Equatable, Codable {
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

    enum CodingKeys: String, CodingKey {
        case accountId = "account_id", productId = "product_id", originalTransactionId = "original_transaction_id"
        case latestTransactionId = "latest_transaction_id", state, entitled, expiresAt = "expires_at"
        case gracePeriodExpiresAt = "grace_period_expires_at", autoRenew = "auto_renew"
        case autoRenewProductId = "auto_renew_product_id", environment, ownershipType = "ownership_type"
        case refundedAt = "refunded_at"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        accountId = try container.decode(String.self, forKey: .accountId)
        productId = try container.decode(String.self, forKey: .productId)
        originalTransactionId = try container.decode(String.self, forKey: .originalTransactionId)
        latestTransactionId = try container.decodeIfPresent(String.self, forKey: .latestTransactionId)
        state = try container.decode(EntitlementState.self, forKey: .state)
        expiresAt = try container.decodeIfPresent(Date.self, forKey: .expiresAt)
        gracePeriodExpiresAt = try container.decodeIfPresent(Date.self, forKey: .gracePeriodExpiresAt)
        autoRenew = try container.decodeIfPresent(Bool.self, forKey: .autoRenew)
        autoRenewProductId = try container.decodeIfPresent(String.self, forKey: .autoRenewProductId)
        environment = try container.decodeIfPresent(String.self, forKey: .environment)
        ownershipType = try container.decodeIfPresent(String.self, forKey: .ownershipType)
        refundedAt = try container.decodeIfPresent(Date.self, forKey: .refundedAt)
    }

    /// Encodes every column (nulls included) with `entitled`, so `jsonb_populate_record` can
    /// rebuild the row from a correction's `after`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(accountId, forKey: .accountId)
        try container.encode(productId, forKey: .productId)
        try container.encode(originalTransactionId, forKey: .originalTransactionId)
        try container.encode(latestTransactionId, forKey: .latestTransactionId)
        try container.encode(state, forKey: .state)
        try container.encode(entitled, forKey: .entitled)
        try container.encode(expiresAt, forKey: .expiresAt)
        try container.encode(gracePeriodExpiresAt, forKey: .gracePeriodExpiresAt)
        try container.encode(autoRenew, forKey: .autoRenew)
        try container.encode(autoRenewProductId, forKey: .autoRenewProductId)
        try container.encode(environment, forKey: .environment)
        try container.encode(ownershipType, forKey: .ownershipType)
        try container.encode(refundedAt, forKey: .refundedAt)
    }
}
