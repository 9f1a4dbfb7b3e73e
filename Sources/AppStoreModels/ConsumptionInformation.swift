/// The body of Send Consumption Information (V2, App Store Server API 1.19): what the app tells
/// Apple about a purchase the customer asked to have refunded (docs/consumption.md).
public struct ConsumptionInformation: Sendable, Equatable {
    /// `deliveryStatus`.
    public enum DeliveryStatus: String, Sendable, CaseIterable {
        case delivered = "DELIVERED"
        case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
        case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
        case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
        case undeliveredOther = "UNDELIVERED_OTHER"
    }

    /// `refundPreference`: the app's wish, which Apple weighs.
    public enum RefundPreference: String, Sendable, CaseIterable {
        case decline = "DECLINE"
        case grantFull = "GRANT_FULL"
        case grantProrated = "GRANT_PRORATED"
    }

    /// Always true: without the customer's consent nothing is sent at all.
    public let customerConsented = true
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// Milliunits, 0 to 100000; never for an auto-renewable subscription.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference?

    public init(deliveryStatus: DeliveryStatus, sampleContentProvided: Bool, consumptionPercentage: Int? = nil,
                refundPreference: RefundPreference? = nil) {
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }

    /// The JSON sent, members in the order of Apple's reference; an absent optional is left out.
    public var json: String {
        var members = [
            "\"customerConsented\":\(customerConsented)",
            "\"deliveryStatus\":\"\(deliveryStatus.rawValue)\"",
            "\"sampleContentProvided\":\(sampleContentProvided)",
        ]
        if let consumptionPercentage { members.append("\"consumptionPercentage\":\(consumptionPercentage)") }
        if let refundPreference { members.append("\"refundPreference\":\"\(refundPreference.rawValue)\"") }
        return "{" + members.joined(separator: ",") + "}"
    }
}
