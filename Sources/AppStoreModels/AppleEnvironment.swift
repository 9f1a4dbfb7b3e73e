import Foundation

/// Apple's two environments (and their verifyReceipt hosts).
public enum AppleEnvironment: String, Sendable, Codable, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"

    /// Reads Apple's spellings: `Production`, `PROD`, `Sandbox`.
    public init?(appleName: String?) {
        switch appleName?.lowercased() {
        case "production", "prod": self = .production
        case "sandbox": self = .sandbox
        default: return nil
        }
    }
}
