import AppStoreModels
import AppleSimulator
import Foundation
import SignedData
import Testing
import TestSupport

/// The boundary sweep over Apple's signed payloads, through the verifier (docs/guarantees.md,
/// "Verify before reading" and "Hostile input"): each boundary value in every field of a signed
/// transaction, a renewal info and a V2 notification, signed three ways.
/// - by the trusted chain: accepted, or rejected by a check whose reason names the field;
/// - by a chain the verifier does not trust, or under a garbage `x5c`: rejected for the chain,
///   whatever the field holds, and no typed value is made of it (the verify-first rule).
///
/// One case at a time (`.serialized`): each signs and verifies about a thousand payloads, and
/// nine at once held both cores of a 2-core machine long enough for other tests' PostgreSQL
/// connections to time out.
@Suite(.serialized) struct SignedBoundarySweepTests {
    static let trusted = try! SigningChain.create()
    static let untrusted = try! SigningChain.create()

    static func verifier() throws -> SignedDataVerifier {
        try SignedDataVerifier(configuration: .init(trustedRoots: [trusted.root], bundleIds: ["com.example.app"], appAppleId: 1234))
    }

    /// How a variant is signed.
    enum Signer: String, CaseIterable, CustomStringConvertible {
        case trusted, untrusted, garbageX5C

        var description: String { rawValue }

        func sign(_ json: String) throws -> String {
            switch self {
            case .trusted: try SignedBoundarySweepTests.trusted.sign(Array(json.utf8))
            case .untrusted: try SignedBoundarySweepTests.untrusted.sign(Array(json.utf8))
            case .garbageX5C:
                Base64URL.encode(Array(#"{"alg":"ES256","x5c":["Zm9v","YmFy!","YmF6"]}"#.utf8)) + "." + Base64URL.encode(Array(json.utf8))
                    + "." + Base64URL.encode([UInt8](repeating: 7, count: 64))
            }
        }
    }

    /// The payload kinds the job verifies.
    enum Kind: String, CaseIterable, CustomStringConvertible {
        case transaction, renewalInfo, notification

        var description: String { rawValue }

        func document() throws -> BoundarySweep.Document {
            switch self {
            case .transaction: BoundarySweep.signedTransaction
            case .renewalInfo: BoundarySweep.signedRenewalInfo
            case .notification:
                BoundarySweep.notificationV2(
                    signedTransactionInfo: try SignedBoundarySweepTests.trusted.sign(Array(BoundarySweep.signedTransaction.root.json.utf8)),
                    signedRenewalInfo: try SignedBoundarySweepTests.trusted.sign(Array(BoundarySweep.signedRenewalInfo.root.json.utf8)))
            }
        }

        /// The first failed check (nil: every check passed), and whether a typed payload was made.
        func verify(_ jws: String, with verifier: SignedDataVerifier) async -> (SignedDataRejection?, decoded: Bool) {
            switch self {
            case .transaction:
                let examination = await verifier.examine(jws, as: JWSTransaction.self, environment: .either)
                return (examination.firstFailure, examination.payload != nil)
            case .renewalInfo:
                let examination = await verifier.examine(jws, as: JWSRenewalInfo.self, environment: .either)
                return (examination.firstFailure, examination.payload != nil)
            case .notification:
                let examination = await verifier.examineNotification(signedPayload: jws)
                return (examination.firstFailure, examination.notification.payload != nil || examination.transaction != nil)
            }
        }
    }

    @Test(arguments: Kind.allCases) func theDocumentBeforeTheSweepVerifies(_ kind: Kind) async throws {
        let (failure, decoded) = await kind.verify(try Signer.trusted.sign(try kind.document().root.json), with: try Self.verifier())
        #expect(failure == nil && decoded)
    }

    @Test(arguments: Kind.allCases, Signer.allCases)
    func everyBoundaryValueInEveryFieldIsAcceptedOrRejectedByName(_ kind: Kind, _ signer: Signer) async throws {
        let verifier = try Self.verifier()
        var accepted = 0
        var wrong: [String] = []
        // Every value under the trusted chain and under a garbage x5c (refused before any chain is
        // built). Under a real chain it does not trust, the verifier reads nothing of the payload
        // either: every field with the values that ever trapped or confused a decoder is enough
        // there, and spares a chain verification per variant (a chain that fails is never cached).
        let hostile: Set<String> = ["-2^63", "2^64", "1e400", "400 digits", "\"NaN\"", "string", "object", "null"]
        for variant in try kind.document().variants where signer != .untrusted || hostile.contains(variant.value.name) {
            let (failure, decoded) = await kind.verify(try signer.sign(variant.json), with: verifier)
            switch signer {
            case .trusted:
                if let failure {
                    if !failure.description.contains(variant.key) { wrong.append("\(variant.label): \(failure)") }
                } else {
                    accepted += 1
                }
            case .untrusted, .garbageX5C:
                // Rejected for its chain, never for what its payload holds, and nothing of it decoded.
                if failure?.check != .chain || decoded { wrong.append("\(variant.label): \(failure?.description ?? "accepted")") }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(8))")
        if signer == .trusted { #expect(accepted > 0) }
    }

    /// A trusted notification whose signed transaction is forged: the transaction is rejected for
    /// its chain whatever it holds, and nothing of it is decoded.
    @Test func aForgedTransactionInsideATrustedNotificationIsRejectedForItsChain() async throws {
        let verifier = try Self.verifier()
        var wrong: [String] = []
        let renewal = try Signer.trusted.sign(BoundarySweep.signedRenewalInfo.root.json)
        for variant in BoundarySweep.signedTransaction.variants where ["string", "-2^63", "1e400", "object"].contains(variant.value.name) {
            let notification = BoundarySweep.notificationV2(signedTransactionInfo: try Signer.untrusted.sign(variant.json), signedRenewalInfo: renewal)
            let examination = await verifier.examineNotification(signedPayload: try Signer.trusted.sign(notification.root.json))
            let failure = examination.firstFailure
            if failure?.check != .chain || failure?.part != "signedTransactionInfo" || examination.transaction?.payload != nil {
                wrong.append("\(variant.label): \(failure?.description ?? "accepted")")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(8))")
    }
}
