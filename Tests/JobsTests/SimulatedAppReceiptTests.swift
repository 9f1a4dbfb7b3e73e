import AppStoreModels
import AppleSimulator
import Foundation
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// The benchmark's and the demo's real-shaped receipts: PKCS#7 the job's own decoder reads whole,
/// carrying the spec the simulator answers from.
@Suite struct SimulatedAppReceiptTests {
    static let spec = Array(#"{"generate":{"subscriptions":[{"original_transaction_id":"500","period_ms":2592000000,"product_id":"pro.monthly","renewals":3,"start_ms":1790000000000}],"purchases":[{"product_id":"coins.100","transaction_id":"9","purchase_ms":1790000000000}]}}"#.utf8)

    @Test func theJobsDecoderReadsEveryRecordAndTheSimulatorFindsItsSpec() throws {
        let signer = try SimulatedAppReceipt.Signer(chain: try SigningChain.create())
        let der = try SimulatedAppReceipt.make(specJSON: Self.spec, signer: signer, creationDate: Date(ms: 1_797_000_000_000))
        guard case .appReceipt(let receipt) = try ReceiptDecoder.decode(der) else {
            Issue.record("not decoded as an app receipt")
            return
        }
        #expect(receipt.bundleId == "com.example.app")
        #expect(receipt.receiptType == "Production")
        #expect(receipt.creationDate == Date(ms: 1_797_000_000_000))
        // Three periods of one chain and one consumable: four in-app records, two chains.
        #expect(receipt.inAppPurchases.count == 4)
        #expect(Set(receipt.inAppPurchases.compactMap(\.transactionId)) == ["500", "500001", "500002", "9"])
        #expect(receipt.originalTransactionIds.sorted() == ["500", "9"])
        let last = receipt.inAppPurchases.first { $0.transactionId == "500002" }
        #expect(last?.expiresDate == Date(ms: 1_790_000_000_000 + 3 * 2_592_000_000))
        #expect(last?.purchaseDate == Date(ms: 1_790_000_000_000 + 2 * 2_592_000_000))
        // The base64 the database stores decodes the same way.
        #expect((try? ReceiptDecoder.decode(Array(Data(der).base64EncodedString().utf8))) != nil)
        #expect(SimulatedAppReceipt.spec(in: der) == Self.spec)
        // A real App Store receipt carries no spec.
        let real = Data(base64Encoded: String(decoding: try Fixtures.bytes("receipts/tpinappreceipt-receipt-production.b64"), as: UTF8.self)
            .filter { !$0.isWhitespace })!
        #expect(SimulatedAppReceipt.spec(in: Array(real)) == nil)
    }

    @Test func aRunVerifiesAndDecodesARealShapedReceipt() async throws {
        let signer = try SimulatedAppReceipt.Signer(chain: try SigningChain.create())
        try await RunWorld.with("pkcs7") { world in
            let spec = try JSONSerialization.data(withJSONObject: ["generate": ["subscriptions": [world.subscription(original: "700", endDays: 10)]]])
            let der = try SimulatedAppReceipt.make(specJSON: Array(spec), signer: signer, creationDate: world.now)
            try await world.addReceipt("shaped", Data(der).base64EncodedString())
            let (summary, _) = try await world.run(world.options())
            #expect(summary.accountsProcessed == 1)
            #expect(try await world.entitlements()["shaped/pro.monthly"]?.expiresAt == world.expiry(endDays: 10))
            #expect(try await world.count("""
                SELECT count(*) FROM iap.app_receipts WHERE receipt_bundle_id = 'com.example.app'
                  AND receipt_original_transaction_ids = '{700}'
                """) == 1)
        }
    }
}

/// The simulator's latency with a tail: log-normal around the median, one answer in a hundred
/// past the 99th percentile asked for.
@Suite struct SimulatedLatencyTests {
    @Test func theMedianAndTheTailAreWhatWasAskedFor() {
        let seed = FuzzSeed("theMedianAndTheTailAreWhatWasAskedFor")
        var generator = seed.generator
        let latency = Latency(medianMilliseconds: 50, p99Milliseconds: 200)
        let samples = (0..<20_000).map { _ in latency.sample(using: &generator) }.sorted()
        #expect((47...53).contains(samples[10_000]), "median \(samples[10_000]); \(seed)")
        #expect((180...225).contains(samples[19_800]), "p99 \(samples[19_800]); \(seed)")
        #expect(abs(Double(samples.reduce(0, +)) / 20_000 - latency.meanMilliseconds) < 2.5, "\(seed)")
        #expect(Latency(medianMilliseconds: 50).sample(using: &generator) == 50)
    }
}
