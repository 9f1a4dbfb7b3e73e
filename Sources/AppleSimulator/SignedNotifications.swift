import Foundation

/// Makes App Store Server Notifications V2 bodies, signed by the simulator's chain, from specs
/// written as Apple's decoded payload: `data.transactionInfo` and `data.renewalInfo` are given
/// as objects and signed into `signedTransactionInfo` and `signedRenewalInfo`. A spec may name
/// `simulatorFault` (a `SigningChain.Fault`) to sign the outer payload badly.
public struct SignedNotifications: Sendable {
    public let chain: SigningChain

    public init(chain: SigningChain) {
        self.chain = chain
    }

    public struct BadSpec: Error, CustomStringConvertible {
        public var description: String
    }

    /// One V2 body (`{"signedPayload": "..."}`, one line) for one spec (a JSON object).
    public func body(forSpec spec: [UInt8]) throws -> String {
        guard var payload = try? JSONSerialization.jsonObject(with: Data(spec)) as? [String: Any] else {
            throw BadSpec(description: "a spec must be a JSON object (Apple's decoded notification payload)")
        }
        guard payload["notificationType"] is String else { throw BadSpec(description: "the spec has no notificationType") }
        var fault: SigningChain.Fault?
        if let name = payload.removeValue(forKey: "simulatorFault") {
            guard let name = name as? String, let known = SigningChain.Fault(rawValue: name) else {
                throw BadSpec(description: "simulatorFault must be one of " + SigningChain.Fault.allCases.map(\.rawValue).joined(separator: ", "))
            }
            fault = known
        }
        if payload["notificationUUID"] == nil { payload["notificationUUID"] = UUID().uuidString.lowercased() }
        if payload["version"] == nil { payload["version"] = "2.0" }
        // `"signedDate": null` signs a payload without one (what the verifier must reject), and the
        // inner payloads too unless they name their own.
        let signedDate: Any = payload["signedDate"] ?? Int64(Date().timeIntervalSince1970 * 1_000)
        payload["signedDate"] = signedDate is NSNull ? nil : signedDate
        if var data = payload["data"] as? [String: Any] {
            for (object, signed) in [("transactionInfo", "signedTransactionInfo"), ("renewalInfo", "signedRenewalInfo")] {
                guard var inner = data.removeValue(forKey: object) as? [String: Any] else { continue }
                if inner["signedDate"] == nil { inner["signedDate"] = signedDate }
                if inner["signedDate"] is NSNull { inner["signedDate"] = nil }
                if inner["environment"] == nil, let environment = data["environment"] { inner["environment"] = environment }
                if object == "transactionInfo", inner["bundleId"] == nil, let bundleId = data["bundleId"] { inner["bundleId"] = bundleId }
                data[signed] = try chain.sign(Self.json(inner))
            }
            payload["data"] = data
        }
        let signedPayload = try chain.sign(Self.json(payload), fault: fault)
        return String(decoding: try Self.json(["signedPayload": signedPayload]), as: UTF8.self)
    }

    private static func json(_ object: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }
}
