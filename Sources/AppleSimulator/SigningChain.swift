import AppStoreModels
#if canImport(Glibc)
import Glibc  // rename
#endif
import Crypto
import Foundation
import SwiftASN1
import X509

/// The simulator's own signing chain, shaped like Apple's (a root, an intermediate carrying
/// 1.2.840.113635.100.6.2.1, a leaf carrying 1.2.840.113635.100.6.11.1, all P-256), made once
/// and kept in a directory so that the server and the notification signer share it. The job
/// trusts it only when pointed at its root (`--apple-root-certificate DIR/root.der`).
public struct SigningChain: Sendable {
    public let root: [UInt8]
    public let intermediate: [UInt8]
    public let leaf: [UInt8]
    let intermediateKey: P256.Signing.PrivateKey
    let leafKey: P256.Signing.PrivateKey
    /// The JWS header of this chain, encoded once: with thousands of notifications to sign, the
    /// x5c's base64 was most of the simulator's start.
    private let header: String

    init(root: [UInt8], intermediate: [UInt8], leaf: [UInt8], intermediateKey: P256.Signing.PrivateKey, leafKey: P256.Signing.PrivateKey) {
        (self.root, self.intermediate, self.leaf, self.intermediateKey, self.leafKey) = (root, intermediate, leaf, intermediateKey, leafKey)
        header = Self.header(leaf: leaf, intermediate: intermediate, root: root)
    }

    private static func header(leaf: [UInt8], intermediate: [UInt8], root: [UInt8]) -> String {
        let x5c = [leaf, intermediate, root].map { "\"" + Data($0).base64EncodedString() + "\"" }.joined(separator: ",")
        return Base64URL.encode(Array("{\"alg\":\"ES256\",\"x5c\":[\(x5c)]}".utf8))
    }

    /// Ways to sign badly, for the tests and the demo: each must fail its named check.
    public enum Fault: String, Sendable, CaseIterable {
        /// Signed with a key that is not the leaf's (check `signature`).
        case wrongKey = "wrong-key"
        /// The leaf expired long before the payload was signed (check `validity`).
        case expiredLeaf = "expired-leaf"
        /// The leaf lacks Apple's OID (check `oid`).
        case missingOID = "missing-oid"
        /// One byte of the payload changed after signing (check `signature`).
        case tamperedPayload = "tampered"
    }

    /// The file the job is pointed at: the root, DER.
    public static let rootFileName = "root.der"

    static let leafOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    static let intermediateOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    /// Wide enough for any signedDate the demo and the tests use.
    static let validFrom = Date(timeIntervalSince1970: 1_420_070_400)  // 2015-01-01
    static let validUntil = Date(timeIntervalSince1970: 2_524_608_000)  // 2050-01-01

    /// A new chain.
    public static func create() throws -> SigningChain {
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName {
            CommonName("receipt-reconciler Simulator Root CA")
            OrganizationName("receipt-reconciler simulator")
        }
        let intermediateName = try DistinguishedName {
            CommonName("receipt-reconciler Simulator WWDR Intermediate")
            OrganizationName("receipt-reconciler simulator")
        }
        let root = try certificate(
            key: rootKey.publicKey, subject: rootName, issuer: rootName, issuerKey: rootKey, authority: true, oid: nil)
        let intermediate = try certificate(
            key: intermediateKey.publicKey, subject: intermediateName, issuer: rootName, issuerKey: rootKey,
            authority: true, oid: intermediateOID)
        let chain = SigningChain(
            root: try der(root), intermediate: try der(intermediate), leaf: [], intermediateKey: intermediateKey, leafKey: leafKey)
        return SigningChain(
            root: chain.root, intermediate: chain.intermediate, leaf: try chain.makeLeaf(key: leafKey.publicKey),
            intermediateKey: intermediateKey, leafKey: leafKey)
    }

    /// The chain kept in `directory`, made and written there first if there is none. Safe when
    /// several processes start at once on the same directory: a new chain is written whole in a
    /// directory of its own and renamed into place; whoever loses the race loads the winner's.
    public static func loadOrCreate(directory: URL) throws -> SigningChain {
        if let existing = try load(directory) { return existing }
        let chain = try create()
        let staging = directory.deletingLastPathComponent().appending(path: ".\(directory.lastPathComponent)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        let files = Files(directory: staging)
        try Data(chain.root).write(to: files.root)
        try Data(chain.intermediate).write(to: files.intermediate)
        try Data(chain.leaf).write(to: files.leaf)
        try Data(chain.intermediateKey.pemRepresentation.utf8).write(to: files.intermediateKey)
        try Data(chain.leafKey.pemRepresentation.utf8).write(to: files.leafKey)
        // rename(2) replaces a missing or empty directory atomically, and fails on a full one.
        if rename(staging.path, directory.path) == 0 { return chain }
        try? FileManager.default.removeItem(at: staging)
        guard let winner = try load(directory) else {
            throw SimulatorError("\(directory.path) exists and holds no signing chain")
        }
        return winner
    }

    private static func load(_ directory: URL) throws -> SigningChain? {
        let files = Files(directory: directory)
        guard FileManager.default.fileExists(atPath: files.leafKey.path) else { return nil }
        return SigningChain(
            root: Array(try Data(contentsOf: files.root)), intermediate: Array(try Data(contentsOf: files.intermediate)),
            leaf: Array(try Data(contentsOf: files.leaf)),
            intermediateKey: try P256.Signing.PrivateKey(pemRepresentation: String(contentsOf: files.intermediateKey, encoding: .utf8)),
            leafKey: try P256.Signing.PrivateKey(pemRepresentation: String(contentsOf: files.leafKey, encoding: .utf8)))
    }

    private struct Files {
        let directory: URL
        var root: URL { directory.appending(path: SigningChain.rootFileName) }
        var intermediate: URL { directory.appending(path: "intermediate.der") }
        var leaf: URL { directory.appending(path: "leaf.der") }
        var intermediateKey: URL { directory.appending(path: "intermediate-key.pem") }
        var leafKey: URL { directory.appending(path: "leaf-key.pem") }
    }

    // MARK: Signing

    /// A compact JWS of `payload` (JSON) as Apple makes them: header `{"alg":"ES256","x5c":[...]}`.
    public func sign(_ payload: [UInt8], fault: Fault? = nil) throws -> String {
        var leaf = self.leaf
        var key = leafKey
        switch fault {
        case .wrongKey: key = P256.Signing.PrivateKey()
        case .expiredLeaf: leaf = try makeLeaf(key: leafKey.publicKey, validUntil: Self.validFrom.addingTimeInterval(86_400))
        case .missingOID: leaf = try makeLeaf(key: leafKey.publicKey, oid: nil)
        case .tamperedPayload, nil: break
        }
        let header = leaf == self.leaf ? self.header : Self.header(leaf: leaf, intermediate: intermediate, root: root)
        let signingInput = header + "." + Base64URL.encode(payload)
        let signature = try key.signature(for: Array(signingInput.utf8)).rawRepresentation
        guard fault == .tamperedPayload else { return signingInput + "." + Base64URL.encode(signature) }
        // One character of the notificationUUID (else the first digit) changed: the JSON stays valid
        // and every claim true, only the signature can tell.
        var tampered = payload
        let marker = Array("\"notificationUUID\":\"".utf8)
        let uuid = (0..<max(0, tampered.count - marker.count)).first { Array(tampered[$0..<($0 + marker.count)]) == marker }
            .map { $0 + marker.count }
        if let index = uuid ?? tampered.firstIndex(where: { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
            tampered[index] = tampered[index] == UInt8(ascii: "a") ? UInt8(ascii: "b") : UInt8(ascii: "a")
        }
        return header + "." + Base64URL.encode(tampered) + "." + Base64URL.encode(signature)
    }

    private func makeLeaf(key: P256.Signing.PublicKey, validUntil: Date = Self.validUntil, oid: ASN1ObjectIdentifier? = Self.leafOID) throws -> [UInt8] {
        let intermediate = try Certificate(derEncoded: self.intermediate)
        let name = try DistinguishedName {
            CommonName("receipt-reconciler Simulator Receipt Signing")
            OrganizationName("receipt-reconciler simulator")
        }
        return try Self.der(try Self.certificate(
            key: key, subject: name, issuer: intermediate.subject, issuerKey: intermediateKey, authority: false, oid: oid,
            validUntil: validUntil))
    }

    private static func certificate(
        key: P256.Signing.PublicKey, subject: DistinguishedName, issuer: DistinguishedName, issuerKey: P256.Signing.PrivateKey,
        authority: Bool, oid: ASN1ObjectIdentifier?, validUntil: Date = validUntil
    ) throws -> Certificate {
        try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key),
            notValidBefore: validFrom, notValidAfter: validUntil, issuer: issuer, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(authority ? BasicConstraints.isCertificateAuthority(maxPathLength: nil) : BasicConstraints.notCertificateAuthority)
                if let oid {
                    // Apple's marker extensions hold an ASN.1 NULL.
                    Certificate.Extension(oid: oid, critical: false, value: [0x05, 0x00])
                }
            },
            issuerPrivateKey: .init(issuerKey))
    }

    private static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}
