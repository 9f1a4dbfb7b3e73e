import Foundation
import Locking

/// What the simulated Send Consumption Information received: one entry per request, refused ones
/// included, served at `GET /__consumption` for the tests and the demo.
public struct ReceivedConsumption: Sendable {
    public var transactionId: String
    public var environment: String
    public var body: String
    public var status: Int
    public var errorCode: Int?
}

extension AppleSimulator {
    /// The error codes for a body Apple refuses: Apple's own number where its error-code list gives
    /// one (GeneralBadRequestError, InvalidCustomerConsentedError, InvalidDeliveryStatusError,
    /// InvalidSampleContentProvidedError, InvalidRefundPreferenceError,
    /// ConsumptionPercentageAutoRenewableSubscriptionError); else the simulator's own, outside
    /// Apple's ranges (Apple names ConsumptionPercentageOutOfRangeError and
    /// UndeliveredConsumptionPercentageNonZeroError without a number we could confirm), so that no
    /// test or operator ever mistakes one for Apple's.
    enum ConsumptionError: Int {
        case invalidRequest = 4000000
        case customerConsented = 4000035
        case deliveryStatus = 4000036
        case sampleContentProvided = 4000041
        case refundPreference = 4000044
        case percentageForAutoRenewable = 4000209
        case percentageOutOfRange = 9000001
        case undeliveredPercentageNonZero = 9000002
        case proratedWithoutPercentage = 9000003
    }

    static let deliveryStatuses: Set<String> = [
        "DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER",
    ]

    /// `PUT /inApps/v2/transactions/consumption/{transactionId}`: Apple's validation, then 202.
    func consumption(transactionId: String, environment: String, body: [UInt8]) -> SimulatedReply {
        if let retryAfter = apiTraffic.admit("consumption", environment: environment) {
            return Self.rateLimited(retryAfter: retryAfter)
        }
        if let scripted = scriptedFault(scenario.consumptionFaults[transactionId] ?? [], counter: "api:consumption:\(transactionId)") {
            received(transactionId, environment, body, status: scripted.fault.http, errorCode: scripted.fault.errorCode)
            return scripted.reply
        }
        let refusal = Self.validateConsumption(body, productType: productType(of: transactionId))
        received(transactionId, environment, body, status: refusal == nil ? 202 : 400, errorCode: refusal?.rawValue)
        if let refusal { return Self.apiError(400, refusal.rawValue, "\(refusal)") }
        return .respond(status: 202, body: [])
    }

    /// The V2 body as Apple reads it: a flag is `true` or `false`, never `1`.
    struct ConsumptionBody: Decodable {
        var customerConsented: Bool?
        var deliveryStatus: String?
        var sampleContentProvided: Bool?
        var consumptionPercentage: Int?
        var percentageGiven = false
        var refundPreference: String?

        enum CodingKeys: String, CodingKey {
            case customerConsented, deliveryStatus, sampleContentProvided, consumptionPercentage, refundPreference
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            customerConsented = try? container.decodeIfPresent(Bool.self, forKey: .customerConsented)
            deliveryStatus = try? container.decodeIfPresent(String.self, forKey: .deliveryStatus)
            sampleContentProvided = try? container.decodeIfPresent(Bool.self, forKey: .sampleContentProvided)
            percentageGiven = container.contains(.consumptionPercentage)
            consumptionPercentage = try? container.decodeIfPresent(Int.self, forKey: .consumptionPercentage)
            refundPreference = try? container.decodeIfPresent(String.self, forKey: .refundPreference)
        }
    }

    /// Apple's rules for the V2 body (App Store Server API 1.19).
    static func validateConsumption(_ bytes: [UInt8], productType: String?) -> ConsumptionError? {
        guard let body = try? JSONDecoder().decode(ConsumptionBody.self, from: Data(bytes)) else { return .invalidRequest }
        guard body.customerConsented == true else { return .customerConsented }
        guard let delivery = body.deliveryStatus, deliveryStatuses.contains(delivery) else { return .deliveryStatus }
        guard body.sampleContentProvided != nil else { return .sampleContentProvided }
        let prorated = body.refundPreference == "GRANT_PRORATED"
        if let preference = body.refundPreference, !["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(preference) { return .refundPreference }
        if body.percentageGiven {
            if productType == "Auto-Renewable Subscription" { return .percentageForAutoRenewable }
            guard let percentage = body.consumptionPercentage, (0...100_000).contains(percentage) else { return .percentageOutOfRange }
            if delivery != "DELIVERED" && percentage != 0 { return .undeliveredPercentageNonZero }
            if prorated && !(1..<100_000).contains(percentage) { return .proratedWithoutPercentage }
        } else if prorated && productType != nil && productType != "Auto-Renewable Subscription" {
            return .proratedWithoutPercentage
        }
        return nil
    }

    /// Apple's product type of a transaction: the scenario's `api.consumption.types`, else its API chain's.
    private func productType(of transactionId: String) -> String? {
        if let type = scenario.consumptionTypes[transactionId] { return type }
        guard let original = apiWorld.chainKey[transactionId], let chain = scenario.apiChains[original] else { return nil }
        return chain.transactions.first { $0["transactionId"] as? String == transactionId }?["type"] as? String
            ?? chain.transactions.first?["type"] as? String
    }

    private func received(_ transactionId: String, _ environment: String, _ body: [UInt8], status: Int, errorCode: Int?) {
        consumptionLog.withLock {
            $0.append(ReceivedConsumption(
                transactionId: transactionId, environment: environment, body: String(decoding: body, as: UTF8.self), status: status,
                errorCode: errorCode))
        }
    }

    /// `GET /__consumption`: every Send Consumption Information received, in order.
    var consumptionReceived: [UInt8] {
        let entries = consumptionLog.withLock { $0 }.map { entry -> [String: Any] in
            var object: [String: Any] = [
                "transaction_id": entry.transactionId, "environment": entry.environment, "body": entry.body, "status": entry.status,
            ]
            if let code = entry.errorCode { object["error_code"] = code }
            return object
        }
        return Array((try? JSONSerialization.data(withJSONObject: entries, options: [.sortedKeys])) ?? Data("[]".utf8))
    }
}
