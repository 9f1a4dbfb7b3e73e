import AppStoreModels
import Crypto
import Foundation
import Locking

/// The App Store Server API's credentials: the in-app purchase key from App Store Connect.
/// Printing them shows the ids, never the key.
public struct ServerAPICredentials: Sendable, CustomStringConvertible {
    public var issuerId: String
    public var keyId: String
    public var bundleId: String
    let key: P256.Signing.PrivateKey

    /// Reads the `.p8` file (PKCS#8 PEM, P-256). The error names the file, never its content.
    public init(issuerId: String, keyId: String, bundleId: String, privateKeyPEM: String) throws(CredentialsError) {
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
        } catch {
            throw CredentialsError(description: "the private key is not a PKCS#8 P-256 key in PEM (an App Store Connect .p8 file)")
        }
        self.issuerId = issuerId
        self.keyId = keyId
        self.bundleId = bundleId
    }

    public var description: String { "issuer \(issuerId), key \(keyId), bundle \(bundleId)" }

    public struct CredentialsError: Error, CustomStringConvertible {
        public var description: String
    }
}

/// The bearer token of the Server API: an ES256 JWT (`alg` ES256, `kid`, `typ` JWT; `iss`, `iat`,
/// `exp`, `aud` appstoreconnect-v1, `bid`), made once and made again before it expires. It grants
/// access to the app's purchase data: it is never logged, and never leaves this type but in the
/// `Authorization` header.
public final class ServerAPIToken: Sendable {
    private let credentials: ServerAPICredentials
    private let current = Locked<(token: String, expires: Date)?>(nil)
    /// Apple accepts at most 60 minutes.
    public static let lifetime: TimeInterval = 20 * 60
    /// A token closer than this to its expiry is replaced before use.
    public static let renewalMargin: TimeInterval = 5 * 60

    public init(credentials: ServerAPICredentials) {
        self.credentials = credentials
    }

    /// The `Authorization` header's value.
    public func authorization(now: Date = Date()) throws -> String {
        if let (token, expires) = current.withLock({ $0 }), expires.timeIntervalSince(now) > Self.renewalMargin {
            return "Bearer " + token
        }
        let issued = now.timeIntervalSince1970.rounded(.down)
        let token = try Self.make(credentials, issuedAt: Int64(issued))
        current.withLock { $0 = (token, Date(timeIntervalSince1970: issued + Self.lifetime)) }
        return "Bearer " + token
    }

    static func make(_ credentials: ServerAPICredentials, issuedAt: Int64) throws -> String {
        func json(_ object: [String: Any]) throws -> [UInt8] {
            Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
        }
        let header = try json(["alg": "ES256", "kid": credentials.keyId, "typ": "JWT"])
        let claims = try json([
            "iss": credentials.issuerId, "iat": issuedAt, "exp": issuedAt + Int64(lifetime), "aud": "appstoreconnect-v1",
            "bid": credentials.bundleId,
        ])
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        let signature = try credentials.key.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }
}
