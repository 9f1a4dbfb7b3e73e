import AppStoreModels
import AppleSimulator
import Foundation
import Locking
import SignedData
import Testing

/// Each verification failure, made by the simulator's signer, fails exactly its named check.
@Suite struct VerificationFailureTests {
    static let chain = try! SigningChain.create()

    static func verifier(roots: [[UInt8]] = [chain.root], appAppleId: Int64? = 1234) throws -> SignedDataVerifier {
        try SignedDataVerifier(configuration: .init(trustedRoots: roots, bundleIds: ["com.example.app"], appAppleId: appAppleId))
    }

    static func notification(
        fault: String? = nil, bundleId: String = "com.example.app", environment: String = "Sandbox", appAppleId: Int64? = 1234,
        transactionEnvironment: String? = nil, signedDate: Any? = nil, transactionSignedDate: Any? = nil
    ) throws -> String {
        var data: [String: Any] = ["bundleId": bundleId, "environment": environment]
        if let appAppleId { data["appAppleId"] = appAppleId }
        var transaction: [String: Any] = [
            "transactionId": "2000000000000001", "originalTransactionId": "2000000000000001", "productId": "coins.100",
            "type": "Consumable", "purchaseDate": 1_700_000_000_000, "price": 990, "currency": "EUR",
        ]
        if let transactionEnvironment { transaction["environment"] = transactionEnvironment }
        if let transactionSignedDate { transaction["signedDate"] = transactionSignedDate }
        data["transactionInfo"] = transaction
        var spec: [String: Any] = ["notificationType": "REFUND", "notificationUUID": "00000000-0000-4000-8000-000000000001", "data": data]
        if let fault { spec["simulatorFault"] = fault }
        if let signedDate { spec["signedDate"] = signedDate }
        let body = try SignedNotifications(chain: chain).body(forSpec: Array(try JSONSerialization.data(withJSONObject: spec)))
        return try #require(NotificationV2Body.signedPayload(Array(body.utf8)))
    }

    static func firstFailure(_ signedPayload: String, verifier: SignedDataVerifier? = nil) async throws -> SignedDataRejection? {
        let verifier = try verifier ?? Self.verifier()
        do {
            _ = try await verifier.verifyNotification(signedPayload: signedPayload)
            return nil
        } catch {
            return error
        }
    }

    @Test func aWellSignedNotificationVerifies() async throws {
        let verified = try await Self.verifier().verifyNotification(signedPayload: Self.notification())
        #expect(verified.payload.notificationType == .refund)
        #expect(verified.transaction?.price == 990 && verified.transaction?.currency == "EUR")
        #expect(verified.transaction?.bundleId == "com.example.app" && verified.transaction?.environment == .sandbox)
    }

    static let faults: [(String?, String, String, Int64?, SignedDataCheck, String?)] = [
        ("wrong-key", "com.example.app", "Sandbox", 1234, .signature, nil),
        ("tampered", "com.example.app", "Sandbox", 1234, .signature, nil),
        ("expired-leaf", "com.example.app", "Sandbox", 1234, .validity, nil),
        ("missing-oid", "com.example.app", "Sandbox", 1234, .oid, nil),
        (nil, "com.example.other", "Sandbox", 1234, .bundle, nil),
        (nil, "com.example.app", "Production", 999, .appAppleId, nil),
        (nil, "com.example.app", "Production", nil, .appAppleId, nil),
        (nil, "com.example.app", "Xcode", 1234, .environment, nil),
    ]

    @Test(arguments: faults)
    func eachFaultFailsItsCheck(fault: String?, bundleId: String, environment: String, appAppleId: Int64?, check: SignedDataCheck, part: String?) async throws {
        let rejection = try await Self.firstFailure(Self.notification(fault: fault, bundleId: bundleId, environment: environment, appAppleId: appAppleId))
        #expect(rejection?.check == check)
        #expect(rejection?.part == part)
        #expect(rejection?.reason == "jws_invalid: \(check.rawValue)")
    }

    /// Validity is checked at the time Apple signed: the payload's signedDate, else (a notification)
    /// its transaction's. With neither there is no such time, and "now" is never taken for it.
    @Test func noSignedDateAnywhereFailsValidity() async throws {
        let undated = try Self.notification(signedDate: NSNull())
        let rejection = try await Self.firstFailure(undated)
        #expect(rejection?.check == .validity)
        #expect(rejection?.part == nil)
        #expect(rejection?.reason == "jws_invalid: validity")
        let examination = await (try Self.verifier()).examineNotification(signedPayload: undated)
        let validity = try #require(examination.notification.results.first { $0.check == .validity })
        #expect(!validity.passed && validity.detail.hasPrefix("no signedDate (nor on its signed transaction)"), "\(validity.detail)")
        // Every other check of the payload passed: only the missing date fails it.
        #expect(examination.notification.results.filter { !$0.passed }.map(\.check) == [.validity])

        // The payload has none but its transaction has: checked at the transaction's.
        let transactionDated = try Self.notification(signedDate: NSNull(), transactionSignedDate: 1_700_000_000_000)
        #expect(try await Self.firstFailure(transactionDated) == nil)
        // A transaction with no signedDate of its own fails, whatever the notification around it says.
        let innerUndated = try Self.notification(transactionSignedDate: NSNull())
        #expect(try await Self.firstFailure(innerUndated)?.reason == "jws_invalid: validity (signedTransactionInfo)")
    }

    @Test func productionNeedsTheConfiguredAppAppleId() async throws {
        let production = try Self.notification(environment: "Production")
        #expect(try await Self.firstFailure(production) == nil)
        #expect(try await Self.firstFailure(production, verifier: Self.verifier(appAppleId: nil))?.check == .appAppleId)
    }

    @Test func anotherRootFailsTheChain() async throws {
        let other = try SigningChain.create()
        let rejection = try await Self.firstFailure(Self.notification(), verifier: Self.verifier(roots: [other.root]))
        #expect(rejection?.check == .chain)
        // Apple's real root does not trust the simulator either.
        let apple = try await Self.firstFailure(Self.notification(), verifier: Self.verifier(roots: [AppleRootCertificates.appleRootCAG3]))
        #expect(apple?.check == .chain)
    }

    /// The inner transaction must come from the environment the notification names.
    @Test func anInnerPayloadOfAnotherEnvironmentIsRejected() async throws {
        let rejection = try await Self.firstFailure(Self.notification(transactionEnvironment: "Production"))
        #expect(rejection?.check == .environment)
        #expect(rejection?.part == "signedTransactionInfo")
        #expect(rejection?.reason == "jws_invalid: environment (signedTransactionInfo)")
    }

    @Test func aChainVerifiedOnceIsNotVerifiedAgainButEverySignatureIs() async throws {
        let verifier = try Self.verifier()
        #expect(try await Self.firstFailure(Self.notification(), verifier: verifier) == nil)
        // Same chain (cached now), a signature by another key: still caught.
        #expect(try await Self.firstFailure(Self.notification(fault: "wrong-key"), verifier: verifier)?.check == .signature)
        #expect(try await Self.firstFailure(Self.notification(fault: "tampered"), verifier: verifier)?.check == .signature)
    }
}

/// The simulator's chain directory, made by several processes starting at once (the tests start
/// simulators in parallel on one directory): all end up with one and the same chain.
@Suite struct SigningChainDirectoryTests {
    @Test func concurrentStartsAgreeOnOneChain() throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-chain-race-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let roots = Locked<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if let chain = try? SigningChain.loadOrCreate(directory: directory) { roots.withLock { $0.append(chain.root) } }
        }
        let collected = roots.withLock { $0 }
        #expect(collected.count == 8)
        #expect(Set(collected).count == 1)
        #expect(collected.first == Array(try Data(contentsOf: directory.appending(path: SigningChain.rootFileName))))
    }
}
