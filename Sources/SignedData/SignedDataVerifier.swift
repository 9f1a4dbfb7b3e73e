import AppStoreModels
import CivilCalendar
import Crypto
import Foundation
import Locking
import SwiftASN1
@_spi(DisableValidityCheck) import X509

/// Verifies Apple's signed data (docs/notifications.md, "Signed data and Server Notifications V2") before any field of it is used: the `x5c`
/// chain up to a trusted root with Apple's extension OIDs, validity at the payload's own
/// `signedDate`, the ES256 signature with the leaf's key, then the app's claims. Every check is
/// evaluated and named, so a rejection says which one failed and `inspect` can show them all.
///
/// A chain that verified once is kept (by its bytes) for the life of the verifier; the signature
/// and the claims of every payload are always checked.
public final class SignedDataVerifier: Sendable {
    public let configuration: Configuration
    private let roots: CertificateStore
    private let verifiedChains = Locked<[String: VerifiedChain]>([:])

    /// What a payload must match.
    public struct Configuration: Sendable {
        /// DER certificates of the trusted roots; Apple Root CA - G3 by default.
        public var trustedRoots: [[UInt8]]
        /// The app's bundle ids; a payload for another is rejected.
        public var bundleIds: Set<String>
        /// The app's Apple id, which production notifications must carry.
        public var appAppleId: Int64?

        public init(trustedRoots: [[UInt8]] = [AppleRootCertificates.appleRootCAG3], bundleIds: Set<String>, appAppleId: Int64? = nil) {
            self.trustedRoots = trustedRoots
            self.bundleIds = bundleIds
            self.appAppleId = appAppleId
        }

        /// What the configuration checks compare against, as one string: a rejection for a
        /// configuration check records it, and a run whose fingerprint differs examines that
        /// rejection again.
        public var fingerprint: String {
            "bundle_ids=" + bundleIds.sorted().joined(separator: ",") + ";app_apple_id=" + (appAppleId.map(String.init) ?? "")
        }
    }

    /// A configured root that is no certificate: a configuration error, found at start.
    public struct BadRoot: Error, CustomStringConvertible {
        public var description: String
    }

    public init(configuration: Configuration) throws(BadRoot) {
        self.configuration = configuration
        var roots: [Certificate] = []
        for (index, der) in configuration.trustedRoots.enumerated() {
            do {
                roots.append(try Certificate(derEncoded: der))
            } catch {
                throw BadRoot(description: "trusted root \(index + 1) is not a DER X.509 certificate: \(error)")
            }
        }
        self.roots = CertificateStore(roots)
    }

    /// Which environment a payload may name.
    public enum ExpectedEnvironment: Sendable {
        /// Data fetched from this host must say this environment, where it says one.
        case host(AppleEnvironment)
        /// A notification: Production or Sandbox, the sandbox policy decides later.
        case either
    }

    // MARK: Verifying

    /// The payload, if every check passes; otherwise the first check that failed.
    public func verify<Payload: SignedPayload>(
        _ jws: String, as type: Payload.Type, environment: ExpectedEnvironment
    ) async throws(SignedDataRejection) -> Payload {
        let examination = await examine(jws, as: type, environment: environment)
        if let failed = examination.firstFailure { throw failed }
        guard let payload = examination.payload else { throw SignedDataRejection(check: .format, detail: "no payload") }
        return payload
    }

    /// A V2 notification with its signed transaction and renewal info, each verified.
    public func verifyNotification(signedPayload: String) async throws(SignedDataRejection) -> VerifiedNotificationV2 {
        let examination = await examineNotification(signedPayload: signedPayload)
        if let failed = examination.firstFailure { throw failed }
        guard let payload = examination.notification.payload else { throw SignedDataRejection(check: .format, detail: "no payload") }
        return VerifiedNotificationV2(
            payload: payload, transaction: examination.transaction?.payload, renewalInfo: examination.renewalInfo?.payload)
    }

    /// Every check of a V2 notification's payload, and of the transaction and renewal info inside
    /// (examined only when the notification's own payload verified: nothing is read of one that did not).
    public func examineNotification(signedPayload: String) async -> NotificationExamination {
        let notification = await examine(signedPayload, as: NotificationV2Payload.self, environment: .either) { verifiedJSON in
            // Only once the notification's chain and signature verified, and only when it has no signedDate.
            UnverifiedPayload.signedTransactionInfo(ofNotification: verifiedJSON)
                .flatMap { try? CompactJWS($0) }
                .flatMap { if case .date(let date) = UnverifiedPayload($0.payload).signedDate { date } else { nil } }
        }
        // The inner payloads must come from the environment the notification names.
        let environment: ExpectedEnvironment = AppleEnvironment(appleName: notification.payload?.rawEnvironment).map { .host($0) } ?? .either
        var transaction: SignedDataExamination<JWSTransaction>?
        var renewalInfo: SignedDataExamination<JWSRenewalInfo>?
        if let signed = notification.payload?.signedTransactionInfo {
            transaction = await examine(signed, as: JWSTransaction.self, environment: environment)
        }
        if let signed = notification.payload?.signedRenewalInfo {
            renewalInfo = await examine(signed, as: JWSRenewalInfo.self, environment: environment)
        }
        return NotificationExamination(notification: notification, transaction: transaction, renewalInfo: renewalInfo)
    }

    // MARK: Examining

    /// Every check of one JWS with its result, and the payload decoded once the checks that make
    /// it Apple's (chain, OIDs, validity, signature) passed.
    public func examine<Payload: SignedPayload>(
        _ text: String, as type: Payload.Type, environment: ExpectedEnvironment
    ) async -> SignedDataExamination<Payload> {
        await examine(text, as: type, environment: environment) { _ in nil }
    }

    /// The same; `signedDateFallback` gives the time to check validity at when the payload has no
    /// `signedDate`. It is handed the payload's bytes only once the chain and the signature passed.
    ///
    /// Verify before reading (docs/guarantees.md): of the payload, only `signedDate` is read (by
    /// `UnverifiedPayload`, which cannot fail or trap) until chain, OIDs, validity and signature
    /// have passed; only then is it decoded into typed values, and its claims checked.
    private func examine<Payload: SignedPayload>(
        _ text: String, as type: Payload.Type, environment: ExpectedEnvironment, signedDateFallback: ([UInt8]) -> Date?
    ) async -> SignedDataExamination<Payload> {
        var results: [SignedDataCheckResult] = []
        func record(_ check: SignedDataCheck, _ passed: Bool, _ detail: String) {
            results.append(SignedDataCheckResult(check: check, passed: passed, detail: detail))
        }
        let jws: CompactJWS
        do {
            jws = try CompactJWS(text)
        } catch {
            record(.format, false, error.description)
            return SignedDataExamination(results: results, payload: nil, payloadJSON: nil)
        }
        record(.format, true, "compact JWS, \(jws.header.certificateChain?.count ?? 0) certificate(s) in x5c")
        let algorithm = jws.header.algorithm ?? "(none)"
        record(.algorithm, algorithm == "ES256", algorithm == "ES256" ? "ES256" : "alg is \(algorithm), Apple signs with ES256")

        let chain = await verifiedChain(jws)
        record(.chain, chain.linked, chain.chainDetail)
        record(.oid, chain.oidsPresent, chain.oidDetail)
        let signatureValid = Self.signatureIsValid(jws, leafKey: chain.leafKey)

        let (valid, validityDetail) = Self.validity(
            UnverifiedPayload(jws.payload).signedDate, certificates: chain.certificates,
            isNotification: Payload.self == NotificationV2Payload.self
        ) {
            chain.linked && chain.oidsPresent && signatureValid ? signedDateFallback(jws.payload) : nil
        }
        record(.validity, valid, validityDetail)
        record(.signature, signatureValid, chain.leafKey == nil ? "the leaf has no P-256 key" : "ES256 over header.payload with the leaf's key")

        guard results.allSatisfy(\.passed) else {
            // Not Apple's, or not provably: nothing more of it is read.
            return SignedDataExamination(results: results, payload: nil, payloadJSON: jws.payload)
        }
        let payload: Payload
        do {
            payload = try Payload(json: jws.payload)
        } catch {
            record(.payload, false, "signed by Apple, but not a \(Payload.self): \(error)")
            return SignedDataExamination(results: results, payload: nil, payloadJSON: jws.payload)
        }
        record(.payload, true, "a \(Payload.self)")
        checkClaims(payload.claims, of: type, environment: environment, record: record)
        return SignedDataExamination(results: results, payload: payload, payloadJSON: jws.payload)
    }

    /// Whether every certificate was valid when Apple signed: at the payload's `signedDate`, else at
    /// `fallback()` (asked only when there is none, and nil unless the payload proved Apple's).
    /// Never at now: a leaf that has expired would pass for data signed after it did.
    private static func validity(
        _ signedDate: UnverifiedPayload.SignedDate, certificates: [Certificate], isNotification: Bool, fallback: () -> Date?
    ) -> (Bool, String) {
        if case .malformed(let detail) = signedDate { return (false, detail) }
        guard !certificates.isEmpty else { return (false, "no certificate to check") }
        let time: (Date, String)?
        switch signedDate {
        case .date(let date): time = (date, "signedDate")
        case .absent: time = fallback().map { ($0, "the transaction's signedDate") }
        case .malformed: time = nil
        }
        guard let (validationTime, timeSource) = time else {
            return (false, "no signedDate\(isNotification ? " (nor on its signed transaction)" : ""): "
                    + "the certificates cannot be checked at the time Apple signed, and are never checked at now")
        }
        // Compared, not made a range: an unverified certificate may end before it begins, and
        // `notValidBefore...notValidAfter` traps on that (found by fuzzing).
        if let expired = certificates.first(where: { validationTime < $0.notValidBefore || validationTime > $0.notValidAfter }) {
            return (false, "\(expired.subject) is valid \(Timestamp.day(expired.notValidBefore)) to \(Timestamp.day(expired.notValidAfter)), not at \(timeSource) \(Timestamp.format(validationTime))")
        }
        return (true, "every certificate valid at \(timeSource) \(Timestamp.format(validationTime))")
    }

    private func checkClaims<Payload: SignedPayload>(
        _ claims: SignedClaims, of type: Payload.Type, environment: ExpectedEnvironment,
        record: (SignedDataCheck, Bool, String) -> Void
    ) {
        if !Payload.carriesBundleId {
            record(.bundle, true, "\(Payload.self) carries no bundleId")
        } else if configuration.bundleIds.isEmpty {
            record(.bundle, false, "no bundle id is configured (APPSTORE_BUNDLE_ID or --bundle-id)")
        } else if let bundleId = claims.bundleId, configuration.bundleIds.contains(bundleId) {
            record(.bundle, true, bundleId)
        } else {
            record(.bundle, false, "bundleId \(claims.bundleId ?? "(none)") is not the app's (\(configuration.bundleIds.sorted().joined(separator: ", ")))")
        }

        let named = AppleEnvironment(appleName: claims.environment)
        if Payload.carriesAppAppleId && named == .production {
            switch (configuration.appAppleId, claims.appAppleId) {
            case (nil, _): record(.appAppleId, false, "production data, and no APPSTORE_APP_APPLE_ID is configured")
            case (let expected?, let given) where expected == given: record(.appAppleId, true, "\(expected)")
            case (let expected?, let given): record(.appAppleId, false, "appAppleId \(given.map(String.init) ?? "(none)") is not the app's (\(expected))")
            }
        } else {
            record(.appAppleId, true, "not required here")
        }

        switch (environment, claims.environment) {
        case (_, nil): record(.environment, true, "none named (transactions signed in 2021 name none)")
        case (.host(let host), let given?): record(.environment, named == host, named == host ? given : "\(given), but it came from \(host.rawValue)")
        case (.either, let given?): record(.environment, named != nil, named != nil ? given : "\(given) is neither Production nor Sandbox")
        }
    }

    private static func signatureIsValid(_ jws: CompactJWS, leafKey: P256.Signing.PublicKey?) -> Bool {
        guard jws.header.algorithm == "ES256", let leafKey,
              let signature = try? P256.Signing.ECDSASignature(rawRepresentation: jws.signature) else { return false }
        return leafKey.isValidSignature(signature, for: jws.signingInput)
    }

    // MARK: The chain

    /// The chain of a JWS as checked: from the cache when its bytes verified before.
    private func verifiedChain(_ jws: CompactJWS) async -> ChainExamination {
        let key = (jws.header.certificateChain ?? []).joined(separator: ".")
        if let cached = verifiedChains.withLock({ $0[key] }) {
            return ChainExamination(verified: cached)
        }
        let examination = await examineChain(jws)
        if let verified = examination.verified {
            verifiedChains.withLock { cache in
                if cache.count >= 256 { cache.removeAll() }  // Apple rotates leaves yearly; a bound all the same
                cache[key] = verified
            }
        }
        return examination
    }

    private func examineChain(_ jws: CompactJWS) async -> ChainExamination {
        guard let der = jws.certificates else { return ChainExamination(failure: "an x5c entry is not base64") }
        var certificates: [Certificate] = []
        for (index, bytes) in der.enumerated() {
            do {
                certificates.append(try Certificate(derEncoded: bytes))
            } catch {
                return ChainExamination(failure: "x5c[\(index)] is not an X.509 certificate")
            }
        }
        let oids = AppleSigningChainPolicy.oidsPresent(leaf: certificates[0], intermediate: certificates.count > 1 ? certificates[1] : nil)
        guard certificates.count == 3 else {
            return ChainExamination(
                failure: "x5c holds \(certificates.count) certificate(s); Apple's chains hold leaf, intermediate and root",
                certificates: certificates, oids: oids)
        }
        // Apple's own verifier trusts its configured roots, never the root the header brings.
        var verifier = Verifier(rootCertificates: roots) {
            AppleSigningChainPolicy()
            RFC5280Policy.withValidityCheckDisabled()  // checked at the payload's signedDate, below the cache
        }
        let result = await verifier.validate(leaf: certificates[0], intermediates: CertificateStore([certificates[1]]))
        switch result {
        case .validCertificate(let chain):
            return ChainExamination(verified: VerifiedChain(certificates: Array(chain)))
        case .couldNotValidate(let failures):
            let reasons = failures.map(\.policyFailureReason.description)
            // A chain that links up to a root and fails only Apple's OIDs is linked; the OID check says why.
            let linked = !reasons.isEmpty && reasons.allSatisfy { $0.hasPrefix(AppleSigningChainPolicy.oidFailurePrefix) }
            let detail = reasons.first.map { "no chain to a trusted root: \($0)" }
                ?? "x5c[0] and x5c[1] do not chain to a trusted root by their signatures"
            return ChainExamination(
                linked: linked, chainDetail: linked ? "x5c[0] <- x5c[1] <- a trusted root" : detail,
                certificates: [certificates[0], certificates[1], certificates[2]], oids: oids)
        }
    }
}

/// The result of one check.
public struct SignedDataCheckResult: Sendable, Equatable {
    public var check: SignedDataCheck
    public var passed: Bool
    public var detail: String
    /// False for a check that did not run because an earlier one failed (not passed either).
    public var checked = true
}

/// Every check of one JWS, as `inspect` shows them.
public struct SignedDataExamination<Payload: SignedPayload>: Sendable {
    public var results: [SignedDataCheckResult]
    /// Decoded only once chain, OIDs, validity and signature passed; trusted only when
    /// `firstFailure` is nil (the claims may still have failed).
    public var payload: Payload?
    /// The payload's JSON as signed, for showing its every field (`inspect`).
    public var payloadJSON: [UInt8]?

    /// Each check in order; those that did not run (an earlier check failed) as not passed.
    public var allResults: [SignedDataCheckResult] {
        SignedDataCheck.allCases.map { check in
            results.first { $0.check == check } ?? SignedDataCheckResult(
                check: check, passed: false, detail: "not checked: nothing of a payload is read before it is verified", checked: false)
        }
    }

    public var firstFailure: SignedDataRejection? {
        results.first { !$0.passed }.map { SignedDataRejection(check: $0.check, detail: $0.detail) }
    }
}

/// The checks of a V2 notification and of the signed parts inside it.
public struct NotificationExamination: Sendable {
    public var notification: SignedDataExamination<NotificationV2Payload>
    public var transaction: SignedDataExamination<JWSTransaction>?
    public var renewalInfo: SignedDataExamination<JWSRenewalInfo>?

    /// The first failed check: the notification's own, then its transaction's, then its renewal info's.
    public var firstFailure: SignedDataRejection? {
        notification.firstFailure ?? transaction?.firstFailure?.within("signedTransactionInfo")
            ?? renewalInfo?.firstFailure?.within("signedRenewalInfo")
    }
}

/// A V2 notification whose payload, transaction and renewal info all verified.
public struct VerifiedNotificationV2: Sendable {
    public var payload: NotificationV2Payload
    public var transaction: JWSTransaction?
    public var renewalInfo: JWSRenewalInfo?
}

/// A chain whose signatures and OIDs verified: its certificates, and the leaf's key.
struct VerifiedChain: Sendable {
    var certificates: [Certificate]
    var leafKey: P256.Signing.PublicKey?

    init(certificates: [Certificate]) {
        self.certificates = certificates
        leafKey = certificates.first.flatMap { P256.Signing.PublicKey($0.publicKey) }
    }
}

/// What the chain checks found.
struct ChainExamination {
    var linked: Bool
    var chainDetail: String
    var oidsPresent: Bool
    var oidDetail: String
    /// Leaf first; the root is the trusted one when the chain linked.
    var certificates: [Certificate]
    var leafKey: P256.Signing.PublicKey?
    var verified: VerifiedChain?

    init(verified: VerifiedChain) {
        linked = true
        chainDetail = "x5c[0] <- x5c[1] <- a trusted root"
        oidsPresent = true
        oidDetail = "leaf 1.2.840.113635.100.6.11.1, intermediate 1.2.840.113635.100.6.2.1"
        certificates = verified.certificates
        leafKey = verified.leafKey
        self.verified = verified
    }

    init(linked: Bool = false, failure: String? = nil, chainDetail: String? = nil, certificates: [Certificate] = [], oids: (Bool, String) = (false, "not checked")) {
        self.linked = linked
        self.chainDetail = chainDetail ?? failure ?? ""
        (oidsPresent, oidDetail) = oids
        self.certificates = certificates
        leafKey = certificates.first.flatMap { P256.Signing.PublicKey($0.publicKey) }
        verified = nil
    }
}
