import AppStoreModels
import Foundation
import SignedData

/// Times one verification of Apple's signed data, release build: with the chain verified anew
/// (a new verifier each time, as for the first payload of a run) and with the chain cached (every
/// later payload signed by the same leaf). Real Apple-signed fixtures, the built-in root.
@main
struct BenchSignedData {
    static func main() async throws {
        let fixtures = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "Tests/Fixtures/asapi"
        let transaction = try String(contentsOfFile: fixtures + "/real/mingos-signedTransaction-consumable-JPY-sandbox.jws", encoding: .utf8)
        let body = try Data(contentsOf: URL(filePath: fixtures + "/real/gopay-notificationV2Body-DID_RENEW-sandbox.json"))
        let notification = NotificationV2Body.signedPayload(Array(body))!
        let configuration = SignedDataVerifier.Configuration(bundleIds: ["com.goodheartapp", "com.audaos.audarecorder"])

        func measure(_ name: String, _ verify: () async throws -> Void) async rethrows {
            try await verify()  // warm up, and fail here if it does not verify
            var rounds = 0
            let clock = ContinuousClock()
            let started = clock.now
            while clock.now - started < .seconds(3) {
                try await verify()
                rounds += 1
            }
            let perRound = (clock.now - started) / rounds
            let microseconds = Double(perRound.components.attoseconds) / 1e12 + Double(perRound.components.seconds) * 1e6
            print(name.padding(toLength: 58, withPad: " ", startingAt: 0) + String(format: "%8.1f µs", microseconds))
        }

        let shared = try SignedDataVerifier(configuration: configuration)
        try await measure("transaction, chain verified anew") {
            _ = try await SignedDataVerifier(configuration: configuration).verify(transaction, as: JWSTransaction.self, environment: .either)
        }
        try await measure("transaction, chain cached") {
            _ = try await shared.verify(transaction, as: JWSTransaction.self, environment: .either)
        }
        try await measure("V2 notification (3 JWS), chains verified anew") {
            _ = try await SignedDataVerifier(configuration: configuration).verifyNotification(signedPayload: notification)
        }
        try await measure("V2 notification (3 JWS), chains cached") {
            _ = try await shared.verifyNotification(signedPayload: notification)
        }
    }
}
