import AppStoreModels
import Foundation
import SignedData
import Testing
import TestSupport

/// Apple's own library test vectors (Tests/Fixtures/asapi/apple-lib), signed by Apple's test
/// root: they verify with that root given as the trusted one, as in Apple's SignedDataVerifierTests.
@Suite struct AppleLibraryVectorTests {
    static func verifier(bundles: Set<String> = ["com.example"]) throws -> SignedDataVerifier {
        try SignedDataVerifier(configuration: .init(
            trustedRoots: [try Fixtures.bytes("asapi/apple-lib/swift/certs/testCA.der")], bundleIds: bundles, appAppleId: 1234))
    }

    static func vector(_ name: String) throws -> String {
        String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/mock_signed_data/" + name), as: UTF8.self)
    }

    @Test func testNotification() async throws {
        let verified = try await Self.verifier().verifyNotification(signedPayload: Self.vector("testNotification"))
        #expect(verified.payload.notificationType == .test)
        #expect(verified.payload.notificationUUID == "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6")
        #expect(verified.payload.appAppleId == 1234 && verified.payload.bundleId == "com.example")
        #expect(verified.payload.environment == .sandbox)
        #expect(verified.payload.signedDate == Date(ms: 1681314324000))
    }

    @Test func transactionInfo() async throws {
        let verifier = try Self.verifier()
        // The payload holds only the claims: a transaction without an id is no transaction, found
        // once it is verified (it is Apple's test CA's), never before.
        let examination = try await verifier.examine(Self.vector("transactionInfo"), as: JWSTransaction.self, environment: .host(.sandbox))
        #expect(examination.firstFailure?.check == .payload)
        #expect(examination.results.filter(\.passed).map(\.check) == [.format, .algorithm, .chain, .oid, .validity, .signature])
        let claimsOnly = try await verifier.verify(Self.vector("transactionInfo"), as: ClaimsOnly.self, environment: .host(.sandbox))
        #expect(claimsOnly.claims == SignedClaims(signedDate: Date(ms: 1672956154000), bundleId: "com.example", environment: "Sandbox"))
        let otherApp = try await Self.verifier(bundles: ["com.example.x"]).examine(Self.vector("transactionInfo"), as: ClaimsOnly.self, environment: .host(.sandbox))
        #expect(otherApp.firstFailure?.check == .bundle)
    }

    @Test func renewalInfo() async throws {
        let renewal = try await Self.verifier().verify(Self.vector("renewalInfo"), as: JWSRenewalInfo.self, environment: .host(.sandbox))
        #expect(renewal.environment == .sandbox && renewal.signedDate == Date(ms: 1672956154000))
    }

    @Test func wrongBundleId() async throws {
        let examination = try await Self.verifier().examine(Self.vector("wrongBundleId"), as: NotificationV2Payload.self, environment: .either)
        // Apple's vector carries no signedDate: validity fails (it is never checked at now), so
        // nothing of the payload is read, its bundle id included: the claims are not checked.
        #expect(examination.results.filter { !$0.passed }.map(\.check) == [.validity])
        #expect(examination.results.filter(\.passed).map(\.check) == [.format, .algorithm, .chain, .oid, .signature])
        #expect(examination.payload == nil)
        #expect(examination.allResults.first { $0.check == .bundle }?.detail.hasPrefix("not checked") == true)
    }

    @Test func missingX5CHeaderClaim() async throws {
        let examination = try await Self.verifier().examine(Self.vector("missingX5CHeaderClaim"), as: NotificationV2Payload.self, environment: .either)
        #expect(examination.firstFailure?.check == .format)
        #expect(examination.allResults.count == SignedDataCheck.allCases.count)
        #expect(examination.allResults.allSatisfy { !$0.passed })
    }
}

/// A payload read only for its claims (Apple's vectors that carry nothing else).
struct ClaimsOnly: SignedPayload {
    var claims: SignedClaims

    init(json: [UInt8]) throws {
        let object = try JSONSerialization.jsonObject(with: Data(json)) as! [String: Any]
        claims = SignedClaims(
            signedDate: (object["signedDate"] as? Int64).map { Date(ms: $0) }, bundleId: object["bundleId"] as? String,
            environment: object["environment"] as? String)
    }
}
