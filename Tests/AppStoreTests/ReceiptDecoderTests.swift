import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The real receipts in Tests/Fixtures/receipts decode to the values PROVENANCE.md asserts.
@Suite struct ReceiptDecoderTests {
    static func appReceipt(_ name: String) throws -> AppReceipt {
        guard case .appReceipt(let receipt) = try ReceiptDecoder.decode(Fixtures.bytes("receipts/\(name)")) else {
            throw TestSetupError(description: "\(name) is not an app receipt")
        }
        return receipt
    }

    static func date(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

    struct Expectation: Sendable, CustomTestStringConvertible {
        var file: String
        var type: String?
        var bundle: String
        var version: String
        var original: String?
        var created: String
        var purchases: Int
        var testDescription: String { file }
    }

    static let expectations: [Expectation] = [
        .init(file: "apple-asslib-xcode-app-receipt-empty.b64", type: "Xcode", bundle: "com.example.naturelab.backyardbirds.example",
              version: "1", original: nil, created: "2023-10-19T01:18:54Z", purchases: 0),
        .init(file: "apple-asslib-xcode-app-receipt-with-transaction.b64", type: "Xcode",
              bundle: "com.example.naturelab.backyardbirds.example", version: "1", original: nil, created: "2023-10-19T01:45:40Z", purchases: 1),
        .init(file: "tpinappreceipt-receipt-production.b64", type: "Production", bundle: "org.getpure.pure-iphone", version: "15741",
              original: "434", created: "2024-02-23T17:27:16Z", purchases: 4),
        .init(file: "tpinappreceipt-receipt-sandbox-g5.b64", type: "ProductionSandbox", bundle: "dev.bonzer.weeka.app", version: "2",
              original: "1.0", created: "2025-12-26T18:39:47Z", purchases: 2),
        .init(file: "tpinappreceipt-receipt-sandbox-legacy.b64", type: "ProductionSandbox", bundle: "com.nutcall.alert", version: "32",
              original: "1.0", created: "2020-05-06T18:28:49Z", purchases: 187),
        .init(file: "tpinappreceipt-receipt-xcode.b64", type: "Xcode", bundle: "net.zachariadis.cyclemaps", version: "31.10.0",
              original: nil, created: "2020-07-22T17:33:15Z", purchases: 1),
        .init(file: "revenuecat-pr4297-sandboxReceipt3-com.belive.app.ios.b64", type: "ProductionSandbox", bundle: "com.belive.app.ios",
              version: "3", original: "1.0", created: "2018-11-13T16:46:31Z", purchases: 1),
        .init(file: "appreceiptvalidator-grandUnifiedExpiredAppleCert_receipt-com.mbaasy.ios.demo.b64", type: "ProductionSandbox",
              bundle: "com.mbaasy.ios.demo", version: "1", original: "1.0", created: "2015-08-13T07:50:46Z", purchases: 7),
        .init(file: "appreceiptvalidator-hannes_mac_mindnode_2_receipt.der", type: "Production", bundle: "com.ideasoncanvas.MindNodeMac",
              version: "2.5.8", original: "2.5.5", created: "2023-02-22T12:56:25Z", purchases: 0),
        .init(file: "appreceiptvalidator-hannes_mac_mindnode_receipt.der", type: "Production", bundle: "com.ideasoncanvas.MindNodeMac",
              version: "2.5.5", original: "2.5.5", created: "2017-09-04T09:01:20Z", purchases: 0),
        .init(file: "appreceiptvalidator-mac_mindnode_rebought_receipt.der", type: "Production", bundle: "com.ideasoncanvas.MindNodeMac",
              version: "2.5.5", original: "2.5.5", created: "2017-09-04T14:45:30Z", purchases: 0),
        .init(file: "appreceiptvalidator-mindnode_mac_sha256_receipt.der", type: "Production", bundle: "com.ideasoncanvas.mindnode.macos",
              version: "2023.2.2", original: "5.0", created: "2023-08-28T10:24:05Z", purchases: 3),
        .init(file: "appreceiptvalidator-mindnode_ios_michaelsandbox_receipt1.b64", type: "ProductionSandbox",
              bundle: "com.mindnode.mindnodetouch", version: "3394", original: "1.0", created: "2017-09-11T09:38:34Z", purchases: 0),
        .init(file: "appreceiptvalidator-mindnode_ios_michaelsandbox_receipt2.b64", type: "ProductionSandbox",
              bundle: "com.mindnode.mindnodetouch", version: "3392", original: "1.0", created: "2017-08-16T13:13:14Z", purchases: 0),
        .init(file: "appreceiptvalidator-purchasing_experiments_sandbox_receipt.b64", type: "ProductionSandbox",
              bundle: "com.hannesoid.PurchasingExperiments", version: "1", original: "1.0", created: "2023-02-22T14:30:15Z", purchases: 2),
        .init(file: "kvitto-receipt-mac-com.apple.dt.Xcode.der", type: "Production", bundle: "com.apple.dt.Xcode", version: "7.0",
              original: "4.3", created: "2015-09-22T08:55:28Z", purchases: 0),
        .init(file: "kvitto-sandboxReceipt-com.cocoanetics.EmmiView.der", type: "ProductionSandbox", bundle: "com.cocoanetics.EmmiView",
              version: "246", original: "1.0", created: "2015-05-25T15:22:10Z", purchases: 6),
        .init(file: "kvitto-storeKitTestReceipt-com.rd.eehelper.der", type: "Xcode", bundle: "com.rd.eehelper", version: "2020.10.02.1149",
              original: nil, created: "2020-10-16T11:29:30Z", purchases: 1),
        .init(file: "shoshins-ParsingTestZero-com.mbaasy.ios.demo-35-purchases.b64", type: "ProductionSandbox", bundle: "com.mbaasy.ios.demo",
              version: "1", original: "1.0", created: "2015-11-21T18:17:47Z", purchases: 35),
        .init(file: "shoshins-ParsingTestOne-com.mbaasy.ios.demo.b64", type: "ProductionSandbox", bundle: "com.mbaasy.ios.demo",
              version: "1", original: "1.0", created: "2015-11-18T17:13:48Z", purchases: 5),
    ]

    @Test(arguments: expectations)
    func decodes(_ expected: Expectation) throws {
        let receipt = try Self.appReceipt(expected.file)
        #expect(receipt.receiptType == expected.type)
        #expect(receipt.bundleId == expected.bundle)
        #expect(receipt.appVersion == expected.version)
        #expect(receipt.originalAppVersion == expected.original)
        #expect(receipt.creationDate == Self.date(expected.created))
        #expect(receipt.inAppPurchases.count == expected.purchases)
    }

    @Test func productionReceiptPurchases() throws {
        let receipt = try Self.appReceipt("tpinappreceipt-receipt-production.b64")
        #expect(Set(receipt.inAppPurchases.compactMap(\.originalTransactionId)) == ["340001196262039"])
        #expect(receipt.inAppPurchases[0].productId == "org.getpure.pure.Week")
        #expect(receipt.inAppPurchases[0].webOrderLineItemId == 340_000_558_053_130)
        #expect(receipt.inAppPurchases[0].purchaseDate == Self.date("2023-05-09T23:20:55Z"))
        #expect(receipt.inAppPurchases[3].transactionId == "340001311555626")
        #expect(receipt.inAppPurchases[3].expiresDate == Self.date("2023-10-19T23:26:23Z"))
        #expect(receipt.inAppPurchases[2].promotionalOfferId == "org.getpure.pure.Month.Offer.3M.PayToGo")
        #expect(receipt.originalTransactionIds == ["340001196262039"])
    }

    /// 187 purchases whose greatest expiry sits at index 38: neither first nor last.
    @Test func legacySandboxGreatestExpiryInTheMiddle() throws {
        let receipt = try Self.appReceipt("tpinappreceipt-receipt-sandbox-legacy.b64")
        let latest = try #require(receipt.inAppPurchases.indices.max {
            (receipt.inAppPurchases[$0].expiresDate ?? .distantPast) < (receipt.inAppPurchases[$1].expiresDate ?? .distantPast)
        })
        #expect(latest == 38)
        #expect(receipt.inAppPurchases[38].transactionId == "1000000661019370")
        #expect(receipt.inAppPurchases[38].expiresDate == Self.date("2020-05-06T18:31:31Z"))
        #expect(receipt.inAppPurchases.first?.transactionId == "1000000637840752")
        #expect(receipt.inAppPurchases.last?.transactionId == "1000000637840616")
        #expect(receipt.inAppPurchases.filter { $0.productId == "com.nutcallalert.inapp.optimum" }.count == 116)
        #expect(receipt.inAppPurchases.allSatisfy { $0.cancellationDate == nil })
    }

    /// Xcode receipts: BER indefinite lengths and `+hhmm` offsets; no original transaction id.
    @Test func xcodeReceiptsWithOffsets() throws {
        let cyclemaps = try Self.appReceipt("tpinappreceipt-receipt-xcode.b64")
        let purchase = try #require(cyclemaps.inAppPurchases.first)
        #expect(purchase.productId == "CYCLEMAPS_PREMIUM")
        #expect(purchase.transactionId == "0")
        #expect(purchase.purchaseDate == Self.date("2020-07-22T17:33:14Z"))
        #expect(purchase.expiresDate == Self.date("2021-07-22T17:33:14Z"))
        #expect(purchase.isInIntroOfferPeriod == false)
        #expect(cyclemaps.expirationDate == Self.date("4001-01-01T00:00:00Z"))
        let backyard = try Self.appReceipt("apple-asslib-xcode-app-receipt-with-transaction.b64")
        #expect(backyard.inAppPurchases.first?.transactionId == "0")
        #expect(backyard.inAppPurchases.first?.originalTransactionId == nil)
        #expect(backyard.inAppPurchases.first?.productId == "pass.premium")
        #expect(backyard.inAppPurchases.first?.isInIntroOfferPeriod == true)
        let storeKit = try Self.appReceipt("kvitto-storeKitTestReceipt-com.rd.eehelper.der")
        #expect(storeKit.inAppPurchases.first?.productId == "com.rd.eehelper.pro_subscription")
        #expect(storeKit.expirationDate == Self.date("4001-01-01T00:00:00Z"))
    }

    @Test func grandUnifiedPurchases() throws {
        let receipt = try Self.appReceipt("appreceiptvalidator-grandUnifiedExpiredAppleCert_receipt-com.mbaasy.ios.demo.b64")
        #expect(receipt.inAppPurchases[0].productId == "consumable")
        #expect(receipt.inAppPurchases[0].transactionId == "1000000166865231")
        #expect(receipt.inAppPurchases[0].expiresDate == nil)  // present but empty
        #expect(receipt.inAppPurchases[0].productType == 1)
        #expect(receipt.inAppPurchases.dropFirst().allSatisfy { $0.originalTransactionId == "1000000166965150" && $0.productType == 3 })
        #expect(receipt.inAppPurchases.last?.expiresDate == Self.date("2015-08-10T07:19:32Z"))
        #expect(receipt.inAppPurchases.map(\.webOrderLineItemId).dropFirst()
            == [1_000_000_030_274_153, 1_000_000_030_274_154, 1_000_000_030_274_165, 1_000_000_030_274_192,
                1_000_000_030_274_219, 1_000_000_030_274_249])
    }

    @Test func emmiViewFirstPurchaseAndTrial() throws {
        let receipt = try Self.appReceipt("kvitto-sandboxReceipt-com.cocoanetics.EmmiView.der")
        #expect(receipt.inAppPurchases[0].productId == "com.cocoanetics.EmmiView.OneMonth")
        #expect(receipt.inAppPurchases[0].transactionId == "1000000156449405")
        #expect(receipt.inAppPurchases[0].originalTransactionId == "1000000156444989")
        #expect(receipt.inAppPurchases[0].webOrderLineItemId == 1_000_000_029_801_037)
        #expect(receipt.inAppPurchases[5].isTrialPeriod == true)
        #expect(receipt.inAppPurchases[4].transactionId == "1000000156578120")
        #expect(receipt.inAppPurchases[4].expiresDate == Self.date("2015-05-26T03:06:02Z"))
    }

    @Test func shoshinsParsingTestOne() throws {
        let receipt = try Self.appReceipt("shoshins-ParsingTestOne-com.mbaasy.ios.demo.b64")
        #expect(receipt.inAppPurchases.map(\.productId) == ["free_subscription", "non_renewing_subscription", "non_renewing_subscription", "yearly", "yearly"])
        #expect(receipt.inAppPurchases[3].originalTransactionId == "1000000180636226")
        #expect(receipt.inAppPurchases[3].expiresDate == Date(ms: 1_448_346_881_000))
        #expect(receipt.inAppPurchases.map(\.productType) == [4, 2, 2, 3, 3])
        #expect(receipt.inAppPurchases[4].isTrialPeriod == true)
    }

    @Test func legacyTransactionReceiptsAreRecognised() throws {
        guard case .legacyTransactionReceipt(let apple) = try ReceiptDecoder.decode(Fixtures.bytes("receipts/apple-asslib-legacy-transaction-receipt.b64")) else {
            Issue.record("not recognised as a legacy transaction receipt")
            return
        }
        #expect(apple.purchaseInfo["transaction-id"] == "33993399")
        guard case .legacyTransactionReceipt(let mindmob) = try ReceiptDecoder.decode(
            Fixtures.bytes("receipts/aporat-legacy-ios6-transaction-receipt-com.mindmobapp.MindMob.b64")) else {
            Issue.record("not recognised as a legacy transaction receipt")
            return
        }
        #expect(mindmob.purchaseInfo["bid"] == "com.mindmobapp.MindMob")
        #expect(mindmob.purchaseInfo["product-id"] == "com.mindmobapp.download")
        #expect(mindmob.purchaseInfo["transaction-id"] == "1000000046178817")
        #expect(mindmob.purchaseInfo["purchase-date-ms"] == "1335798355868")
        #expect(mindmob.environment == "Sandbox")
        for name in ["appreceiptvalidator-deprecatedSinglesTypeExpiredAppleCert_receipt-ios6-transaction.b64",
                     "revenuecat-pr4297-legacy-ios6-transaction-receipt2-com.es.Purchaser.b64"] {
            guard case .legacyTransactionReceipt(let legacy) = try ReceiptDecoder.decode(Fixtures.bytes("receipts/\(name)")) else {
                Issue.record("\(name) not recognised")
                continue
            }
            #expect(legacy.environment == "Sandbox")
        }
    }

    @Test func receiptDates() {
        #expect(ReceiptDecoder.parseReceiptDate("2020-07-22T18:33:15+0100") == Self.date("2020-07-22T17:33:15Z"))
        #expect(ReceiptDecoder.parseReceiptDate("4001-01-01T02:00:00+0200") == Self.date("4001-01-01T00:00:00Z"))
        #expect(ReceiptDecoder.parseReceiptDate("2023-10-19T01:18:54Z") == Self.date("2023-10-19T01:18:54Z"))
        #expect(ReceiptDecoder.parseReceiptDate("2023-10-19T01:18:54-05:30") == Self.date("2023-10-19T06:48:54Z"))
        #expect(ReceiptDecoder.parseReceiptDate("2023-10-19T01:18:54.250Z") == Self.date("2023-10-19T01:18:54Z").addingTimeInterval(0.25))
        for bad in ["", "2023-10-19", "2023-13-19T01:18:54Z", "2023-10-19T01:18:54", "2023-10-19T01:18:54Zjunk", "2023-10-19 01:18:54Z"] {
            #expect(ReceiptDecoder.parseReceiptDate(bad) == nil, "\(bad)")
        }
    }

    /// Found by the mutation test: a quoted value ending in a lone backslash.
    @Test func truncatedLegacyReceiptsAreErrorsNotCrashes() {
        for text in [#"{ "purchase-info" = "abc\"#, #"{ "a" = "\"#, #"{ "a"#, #"{ "a" = "b"; "c" = "#, #"{ "purchase-info" = "!!"; }"#] {
            #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(Array(text.utf8)) }
        }
    }

    @Test func nonReceiptsAreClearErrors() {
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(Fixtures.bytes("receipts/appreceiptvalidator-not_a_receipt.bin")) }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode([]) }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(Array("   \n".utf8)) }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode([0x30, 0x03, 0x02, 0x01, 0x01]) }
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.decode(Array(Data("simulated-receipt:{}".utf8).base64EncodedString().utf8)) }
    }

    /// What `decode` gives, reduced to what `identifiers` reads.
    static func identifiersByFullDecode(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> ReceiptIdentifiers {
        switch try ReceiptDecoder.decode(bytes) {
        case .appReceipt(let receipt):
            return ReceiptIdentifiers(bundleId: receipt.bundleId, originalTransactionIds: receipt.originalTransactionIds)
        case .legacyTransactionReceipt(let legacy):
            let info = legacy.purchaseInfo
            return ReceiptIdentifiers(bundleId: info["bid"], originalTransactionIds: [info["original-transaction-id"] ?? info["transaction-id"]].compactMap { $0 })
        }
    }

    /// The run reads only a receipt's bundle id and original transaction ids: for every real
    /// receipt, the same as the full decode, which the table above checks against PROVENANCE.md.
    @Test func identifiersAreWhatTheFullDecodeSays() throws {
        let names = try Fixtures.files(in: "receipts")
            .filter { !$0.hasSuffix(".md") && !$0.contains("not_a_receipt") }
        #expect(names.count >= 20)
        var purchases = 0
        for name in names {
            let bytes = try Fixtures.bytes("receipts/\(name)")
            let full = try Self.identifiersByFullDecode(bytes)
            #expect(try ReceiptDecoder.identifiers(bytes) == full, "\(name)")
            purchases += full.originalTransactionIds.count
        }
        #expect(purchases > 20)  // dozens of ids in all (the 187 records of one sandbox receipt share a few): really compared
        #expect(throws: ReceiptDecodingError.self) { try ReceiptDecoder.identifiers(Fixtures.bytes("receipts/appreceiptvalidator-not_a_receipt.bin")) }
    }

    /// 10,000 mutated receipts (bytes flipped, cut, inserted): every one decodes or throws, none
    /// crashes; and `identifiers` agrees with the full decode wherever that decodes, and fails
    /// only where it fails too.
    @Test func tenThousandMutatedReceiptsNeverCrash() async throws {
        let seeds = try ["tpinappreceipt-receipt-production.b64", "tpinappreceipt-receipt-xcode.b64",
                         "kvitto-sandboxReceipt-com.cocoanetics.EmmiView.der", "apple-asslib-legacy-transaction-receipt.b64"].map { name -> [UInt8] in
            let bytes = try Fixtures.bytes("receipts/\(name)")
            if let data = Data(base64Encoded: String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }) { return Array(data) }
            return bytes
        }
        // Ten thousand decodes are long CPU work: on a thread of their own, not the cooperative pool
        // the other tests' I/O waits on.
        let seed = FuzzSeed("tenThousandMutatedReceiptsNeverCrash")
        let (decoded, rejected, emptyMessages, disagreements) = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(returning: Self.mutateAndDecode(seeds, seed: seed))
            }
        }
        #expect(emptyMessages == 0, "a rejection without a message; \(seed)")
        #expect(disagreements.isEmpty, "\(disagreements.prefix(3)); \(seed)")
        #expect(rejected > 1_000, "\(seed)")
        #expect(decoded > 0, "no mutation survived: the decoder rejects more than it should; \(seed)")
    }
    static func mutateAndDecode(_ seeds: [[UInt8]], seed: FuzzSeed) -> (decoded: Int, rejected: Int, emptyMessages: Int, disagreements: [String]) {
        var generator = seed.generator
        var decoded = 0
        var rejected = 0
        var emptyMessages = 0
        var disagreements: [String] = []
        for index in 0..<10_000 {
            let bytes = Mutation.binary(seeds[index % seeds.count], edits: 1...8, using: &generator)
            let identifiers = try? ReceiptDecoder.identifiers(bytes)
            do {
                let full = try identifiersByFullDecode(bytes)
                decoded += 1
                if identifiers != full { disagreements.append("mutation \(index): \(String(describing: identifiers)) against \(full)") }
            } catch {
                rejected += 1
                if error.description.isEmpty { emptyMessages += 1 }
            }
            // Fails only where the full decode fails (it may read where that does not: it skips the
            // attributes it does not need).
            if identifiers == nil, (try? ReceiptDecoder.decode(bytes)) != nil { disagreements.append("mutation \(index): identifiers failed alone") }
        }
        return (decoded, rejected, emptyMessages, disagreements)
    }
}
