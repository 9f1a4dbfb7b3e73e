import CivilCalendar
import Foundation

/// The finance audit CSV's columns and cells (docs/reports.md, "Finance audit CSV"): what
/// `export-finance` writes for each `FinanceEvent`, in this order: the 21 columns the CSV always
/// had, then what the journal adds.
public enum FinanceReport {
    public static let columns = [
        "event", "event_time", "account_id", "product_id", "product_type", "transaction_id", "original_transaction_id",
        "web_order_line_item_id", "purchase_date", "expires_date", "cancellation_date", "cancellation_reason", "quantity",
        "is_trial_period", "is_in_intro_offer_period", "offer_code_ref_name", "promotional_offer_id", "ownership_type",
        "environment", "price", "currency",
        "amount", "amount_source", "revocation_type", "revocation_percentage", "storefront", "recorded_at", "adjusts",
    ]

    public static func fields(_ event: FinanceEvent) -> [String?] {
        func flag(_ value: Bool?) -> String? { value.map { $0 ? "true" : "false" } }
        func time(_ value: Date?) -> String? { value.map { Timestamp.format($0) } }
        return [
            event.kind.rawValue, Timestamp.format(event.time), event.accountId, event.productId, event.productType,
            event.transactionId, event.originalTransactionId, event.webOrderLineItemId, time(event.purchaseDate),
            time(event.expiresDate), time(event.cancellationDate), event.cancellationReason.map(String.init),
            event.quantity.map(String.init), flag(event.isTrialPeriod), flag(event.isInIntroOfferPeriod), event.offerCodeRefName,
            event.promotionalOfferId, event.ownershipType, event.environment, event.price.map(MoneyText.decimal(milliunits:)),
            event.currency, event.amount.map(MoneyText.decimal(milliunits:)), event.amountSource.rawValue, event.revocationType,
            event.revocationPercentage.map(String.init), event.storefront, Timestamp.format(event.recordedAt),
            event.adjusts?.rawValue,
        ]
    }
}
