import AppStoreModels
import AppleSimulator
import Foundation
import Hashing
import SignedData
import Testing
import TestSupport

/// Mutated JWS (truncated, extra dots, bad base64url, huge x5c, payloads that are not JSON) never
/// crash the verifier and are never accepted. Seeded: `RR_FUZZ_SEED=N` replays a failure.
@Suite struct MutatedJWSTests {
    static func mutate(_ jws: String, using random: inout SplitMix64) -> String {
        var parts = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        switch Int.random(in: 0..<8, using: &random) {
        case 0:  // truncated anywhere
            return String(jws.prefix(Int.random(in: 0..<jws.count, using: &random)))
        case 1:  // extra dots
            var text = Array(jws)
            for _ in 0..<Int.random(in: 1...3, using: &random) { text.insert(".", at: Int.random(in: 0...text.count, using: &random)) }
            return String(text)
        case 2:  // bytes that are no base64url
            var text = Array(jws.utf8)
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                text[Int.random(in: 0..<text.count, using: &random)] = [UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="), 0x00, 0xFF, UInt8(ascii: " ")].randomElement(using: &random)!
            }
            return String(decoding: text, as: UTF8.self)
        case 3:  // a huge x5c: many certificates, or one enormous one
            let (repeats, count) = [(25, 200), (100_000, 1), (5_000, 3)].randomElement(using: &random)!
            let entry = "\"" + String(repeating: "MIIB", count: repeats) + "\""
            parts[0] = Base64URL.encode(Array("{\"alg\":\"ES256\",\"x5c\":[\(Array(repeating: entry, count: count).joined(separator: ","))]}".utf8))
        case 4:  // a payload that is not JSON, or JSON of the wrong shape
            let payloads = ["not json", "[1,2,3]", "\"text\"", "{\"signedDate\":", String(repeating: "[", count: 5_000), "{\"transactionId\":{}}", "null"]
            parts[1] = Base64URL.encode(Array(payloads.randomElement(using: &random)!.utf8))
        case 5:  // random bytes as the payload
            parts[1] = Base64URL.encode((0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
        case 6:  // a header that is not the header
            let headers = ["{}", "{\"alg\":\"none\"}", "{\"alg\":\"ES256\",\"x5c\":[]}", "{\"alg\":\"ES256\",\"x5c\":[null]}", "{\"alg\":\"ES256\",\"x5c\":\"abc\"}", "{\"alg\":\"ES256\",\"x5c\":[\"!!\"]}"]
            parts[0] = Base64URL.encode(Array(headers.randomElement(using: &random)!.utf8))
        default:  // a signature of the wrong length
            parts[2] = Base64URL.encode((0..<Int.random(in: 0...130, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
        }
        return parts.joined(separator: ".")
    }

    @Test func mutatedJWSAreRejectedAndNothingCrashes() async throws {
        let seed = FuzzSeed("mutatedJWSAreRejectedAndNothingCrashes")
        var random = seed.generator
        let chain = try SigningChain.create()
        let verifier = try SignedDataVerifier(configuration: .init(
            trustedRoots: [AppleRootCertificates.appleRootCAG3, chain.root], bundleIds: ["com.example.app", "com.goodheartapp"], appAppleId: 1))
        let simulated = try SignedNotifications(chain: chain).body(forSpec: Array(#"{"notificationType":"TEST","data":{"bundleId":"com.example.app","environment":"Sandbox"}}"#.utf8))
        let seeds = [
            try #require(NotificationV2Body.signedPayload(Array(simulated.utf8))),
            String(decoding: try Fixtures.bytes("asapi/real/mingos-signedTransaction-consumable-JPY-sandbox.jws"), as: UTF8.self),
            String(decoding: try Fixtures.bytes("asapi/real/goiap-signedRenewalInfo-sandbox.jws"), as: UTF8.self),
        ]
        var accepted = 0
        for iteration in 0..<300 {
            let original = seeds[iteration % seeds.count]
            let mutated = Self.mutate(original, using: &random)
            guard mutated != original else { continue }
            let results = [
                await verifier.examine(mutated, as: NotificationV2Payload.self, environment: .either).firstFailure,
                await verifier.examine(mutated, as: JWSTransaction.self, environment: .either).firstFailure,
                await verifier.examine(mutated, as: JWSRenewalInfo.self, environment: .either).firstFailure,
            ]
            if results.contains(where: { $0 == nil }) {
                accepted += 1
                Issue.record("accepted a mutated JWS (iteration \(iteration)); \(seed)")
            }
        }
        #expect(accepted == 0, "\(seed)")
    }
}
