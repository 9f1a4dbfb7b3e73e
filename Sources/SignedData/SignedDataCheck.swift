import AppStoreModels
import Foundation
import SwiftASN1
import X509

/// The checks of signed data (docs/notifications.md, "Signed data and Server Notifications V2"), in the order a
/// rejection names the first that failed. Nothing of the payload but its `signedDate` is read
/// before `signature`; the claims after it are read from the verified payload.
public enum SignedDataCheck: String, CaseIterable, Sendable, Codable {
    /// A compact JWS with an `x5c` header and a payload of the expected kind.
    case format
    /// `alg` is ES256.
    case algorithm
    /// The leaf is signed by the intermediate, the intermediate by a configured trusted root.
    case chain
    /// Apple's extension OIDs: 1.2.840.113635.100.6.11.1 on the leaf, 1.2.840.113635.100.6.2.1 on the intermediate.
    case oid
    /// Every certificate valid at the payload's `signedDate`.
    case validity
    /// The ES256 signature verifies with the leaf's key.
    case signature
    /// The verified payload decodes as the kind expected (a transaction, a renewal info, a
    /// notification): read only once every check above passed.
    case payload
    /// `bundleId` is the app's.
    case bundle
    /// `appAppleId` is the app's (production notifications).
    case appAppleId = "app_apple_id"
    /// `environment`, where named, is the one the data came from.
    case environment
}

extension SignedDataCheck {
    /// A check of the app's configuration (its bundle ids, app Apple ID, environment), not of
    /// Apple's signature: data it refused is Apple's all the same, and is examined again once the
    /// configuration changes.
    public var isConfiguration: Bool { self == .bundle || self == .appAppleId || self == .environment }
}

/// Why signed data was not used: the check that failed, and what it found.
public struct SignedDataRejection: Error, Sendable, CustomStringConvertible {
    public var check: SignedDataCheck
    public var detail: String
    /// The signed part it was found in, for the inner JWS of a notification.
    public var part: String?

    public init(check: SignedDataCheck, detail: String, part: String? = nil) {
        self.check = check
        self.detail = detail
        self.part = part
    }

    /// The outcome's reason, as reports and `iap.notifications.reason` show it: `jws_invalid: chain`.
    public var reason: String {
        "jws_invalid: \(check.rawValue)" + (part.map { " (\($0))" } ?? "")
    }

    public var description: String { "\(reason): \(detail)" }

    func within(_ part: String) -> SignedDataRejection {
        SignedDataRejection(check: check, detail: detail, part: part)
    }
}

/// Apple's signing chain: exactly leaf, intermediate, root, with Apple's OIDs on the first two.
struct AppleSigningChainPolicy: VerifierPolicy {
    static let leafOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    static let intermediateOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    static let oidFailurePrefix = "apple oid: "

    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) -> PolicyEvaluationResult {
        guard chain.count == 3 else {
            return .failsToMeetPolicy(reason: "a chain of \(chain.count) certificates; Apple's has leaf, intermediate and root")
        }
        let (present, detail) = Self.oidsPresent(leaf: chain[0], intermediate: chain[1])
        return present ? .meetsPolicy : .failsToMeetPolicy(reason: Self.oidFailurePrefix + detail)
    }

    static func oidsPresent(leaf: Certificate, intermediate: Certificate?) -> (Bool, String) {
        if leaf.extensions[oid: leafOID] == nil { return (false, "the leaf lacks \(leafOID)") }
        guard let intermediate else { return (false, "no intermediate") }
        if intermediate.extensions[oid: intermediateOID] == nil { return (false, "the intermediate lacks \(intermediateOID)") }
        return (true, "leaf \(leafOID), intermediate \(intermediateOID)")
    }
}

/// Apple's roots, built into the binary.
public enum AppleRootCertificates {
    /// Apple Root CA - G3 (DER; SHA-256 63343ABF...653E9179), from https://www.apple.com/certificateauthority/.
    public static let appleRootCAG3: [UInt8] = Array(Data(base64Encoded: appleRootCAG3Base64)!)

    private static let appleRootCAG3Base64 = "MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwSQXBwbGUgUm9vdCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9uIEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcNMTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBSb290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9yaXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqGSM49AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtfTjjTuxxEtX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySrMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gAMGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkLF1vLUagM6BgD56KyKA=="
}
