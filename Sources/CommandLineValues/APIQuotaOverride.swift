import AppStore
import AppStoreModels
import Throttling

/// `history=100` or `statuses.sandbox=10`: Apple's quota on one endpoint of the App Store Server API.
public struct APIQuotaOverride: Sendable, Equatable {
    public var endpoint: ServerAPIEndpoint
    public var environment: AppleEnvironment
    public var rate: Double

    public init?(argument: String) {
        let parts = argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let rate = Double(parts[1]), RequestRate.range.contains(rate) else { return nil }
        // Split keeping empty pieces: `.=5` is two empty names, refused, never an index out of range.
        let name = parts[0].split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let endpoint = ServerAPIEndpoint(rawValue: String(name[0])) else { return nil }
        switch name.count == 2 ? String(name[1]) : "production" {
        case "production": environment = .production
        case "sandbox": environment = .sandbox
        default: return nil
        }
        self.endpoint = endpoint
        self.rate = rate
    }
}
