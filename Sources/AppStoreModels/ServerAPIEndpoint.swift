/// The App Store Server API's endpoints that Apple limits one by one.
public enum ServerAPIEndpoint: String, Sendable, CaseIterable, Codable, CodingKeyRepresentable {
    /// Get Transaction History (`/inApps/v2/history/{id}`).
    case history
    /// Get All Subscription Statuses (`/inApps/v1/subscriptions/{id}`).
    case statuses
    /// Get Notification History (`/inApps/v1/notifications/history`).
    case notificationHistory = "notification-history"
    /// Send Consumption Information (`PUT /inApps/v2/transactions/consumption/{id}`).
    case consumption
}

/// One endpoint in one environment: what Apple's quota, the job's budget, the run's summary and
/// the metrics count by. Written `history/Production`, as a summary line and a JSON key.
public struct ServerAPIEndpointKey: Hashable, Sendable, Comparable, CustomStringConvertible, Codable, CodingKeyRepresentable {
    public var endpoint: ServerAPIEndpoint
    public var environment: AppleEnvironment

    public init(_ endpoint: ServerAPIEndpoint, _ environment: AppleEnvironment) {
        self.endpoint = endpoint
        self.environment = environment
    }

    /// `history/Production`; nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let endpoint = ServerAPIEndpoint(rawValue: String(parts[0])),
              let environment = AppleEnvironment(rawValue: String(parts[1])) else { return nil }
        self.init(endpoint, environment)
    }

    public var description: String { "\(endpoint.rawValue)/\(environment.rawValue)" }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.description < rhs.description }

    public var codingKey: any CodingKey { TextKey(stringValue: description) }
    public init?<T: CodingKey>(codingKey: T) { self.init(codingKey.stringValue) }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let key = Self(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an endpoint/environment: \(text)"))
        }
        self = key
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    private struct TextKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
