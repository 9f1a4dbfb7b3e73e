import AppStoreModels
import Foundation
import SignedData
import Testing
import TestSupport

/// Apple-signed data nobody here wrote (Tests/Fixtures/asapi, see its PROVENANCE.md): it verifies
/// against the built-in Apple Root CA - G3 at its own signedDate, decodes to the values the
/// provenance lists, and fails the named check when one byte of it changes.
@Suite struct RealSignedDataTests {
    static let allBundles: Set<String> = [
        "com.Abilities", "com.audaos.audarecorder", "com.jrjj.keysns", "Com.VoiceRecording.Telephone",
        "co.ringalarm.swtich.quarterly2", "com.goodheartapp", "club.omnichess.ios",
    ]

    static func verifier(bundles: Set<String> = allBundles, appAppleId: Int64? = 1601830814, roots: [[UInt8]]? = nil) throws -> SignedDataVerifier {
        try SignedDataVerifier(configuration: .init(
            trustedRoots: roots ?? [AppleRootCertificates.appleRootCAG3], bundleIds: bundles, appAppleId: appAppleId))
    }

    static func text(_ path: String) throws -> String {
        String(decoding: try Fixtures.bytes("asapi/" + path), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func signedPayload(ofBody path: String) throws -> String {
        try #require(NotificationV2Body.signedPayload(Array(text(path).utf8)))
    }

    @Test func theBuiltInRootIsAppleRootCAG3() throws {
        #expect(AppleRootCertificates.appleRootCAG3 == (try Fixtures.bytes("asapi/certs/AppleRootCA-G3.cer")))
        let x5cRoot = try #require(try CompactJWS(Self.text("real/mingos-signedTransaction-consumable-JPY-sandbox.jws")).certificates?.last)
        #expect(x5cRoot == AppleRootCertificates.appleRootCAG3)
    }

    // MARK: Notifications

    @Test func testNotificationOf2022() async throws {
        let verified = try await Self.verifier().verifyNotification(signedPayload: Self.signedPayload(ofBody: "real/aporat-test-notification-signed-payload-TEST-sandbox.json"))
        #expect(verified.payload.notificationType == .test)
        #expect(verified.payload.subtype == nil)
        #expect(verified.payload.notificationUUID == "5e09dcfc-205e-4ea1-9883-96676f394992")
        #expect(verified.payload.bundleId == "com.Abilities")
        #expect(verified.payload.environment == .sandbox)
        #expect(verified.payload.version == "2.0")
        #expect(verified.payload.signedDate == Date(ms: 1662122492884))
        #expect(verified.transaction == nil && verified.renewalInfo == nil)
    }

    /// No top-level signedDate: checked at its transaction's.
    @Test func didRenewWithoutSignedDate() async throws {
        let verified = try await Self.verifier().verifyNotification(signedPayload: Self.signedPayload(ofBody: "real/gopay-notificationV2Body-DID_RENEW-sandbox.json"))
        #expect(verified.payload.notificationType == .didRenew)
        #expect(verified.payload.notificationUUID == "469bf30e-7715-4f9f-aae3-a7bfc12aea77")
        #expect(verified.payload.signedDate == nil)
        #expect(verified.payload.bundleVersion == "7")
        let transaction = try #require(verified.transaction)
        #expect(transaction.transactionId == "2000000004047119")
        #expect(transaction.originalTransactionId == "2000000000842607")
        #expect(transaction.webOrderLineItemId == "2000000000302832")
        #expect(transaction.productId == "com.audaos.audarecorder.vip.m2")
        #expect(transaction.subscriptionGroupIdentifier == "20929536")
        #expect(transaction.type == .autoRenewable && transaction.rawType == "Auto-Renewable Subscription")
        #expect(transaction.inAppOwnershipType == .purchased)
        #expect(transaction.quantity == 1)
        #expect(transaction.purchaseDate == Date(ms: 1646387016000))
        #expect(transaction.originalPurchaseDate == Date(ms: 1646046037000))
        #expect(transaction.expiresDate == Date(ms: 1646387196000))
        #expect(transaction.signedDate == Date(ms: 1646387008254))
        #expect(transaction.environment == .sandbox)
        let renewal = try #require(verified.renewalInfo)
        #expect(renewal.originalTransactionId == "2000000000842607")
        #expect(renewal.autoRenewProductId == "com.audaos.audarecorder.vip.m2")
        #expect(renewal.autoRenewStatus == .on)
        #expect(renewal.signedDate == Date(ms: 1646387008228))
    }

    @Test func productionConsumptionRequest() async throws {
        let signed = try Self.text("real/gopay-signedPayload-CONSUMPTION_REQUEST-production.jws")
        let verified = try await Self.verifier().verifyNotification(signedPayload: signed)
        #expect(verified.payload.notificationType == .consumptionRequest)
        #expect(verified.payload.notificationUUID == "cbff6987-b8d9-43d8-b1dc-07fa8c9fd945")
        #expect(verified.payload.appAppleId == 1601830814)
        #expect(verified.payload.environment == .production)
        #expect(verified.payload.signedDate == Date(ms: 1687941512560))
        let transaction = try #require(verified.transaction)
        #expect(transaction.transactionId == "510001261072921" && transaction.originalTransactionId == "510001261072921")
        #expect(transaction.productId == "com.keysns.JR1200")
        #expect(transaction.type == .consumable)
        #expect(transaction.purchaseDate == Date(ms: 1687239036000))
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.storefront == "CHN" && transaction.storefrontId == "143465")
        #expect(transaction.price == nil && transaction.currency == nil)

        // Production data must carry the configured app Apple id.
        await #expect(throws: SignedDataRejection.self) {
            try await Self.verifier(appAppleId: 1601830815).verifyNotification(signedPayload: signed)
        }
        let examination = try await Self.verifier(appAppleId: nil).examine(signed, as: NotificationV2Payload.self, environment: .either)
        #expect(examination.firstFailure?.check == .appAppleId)
    }

    // MARK: Transactions and renewal infos

    @Test func consumableWithPriceInJPY() async throws {
        let transaction = try await Self.verifier().verify(
            Self.text("real/mingos-signedTransaction-consumable-JPY-sandbox.jws"), as: JWSTransaction.self, environment: .host(.sandbox))
        // The values mingos/app_store_server_api's spec asserts, in full.
        #expect(transaction.transactionId == "2000000847061981")
        #expect(transaction.originalTransactionId == "2000000847061981")
        #expect(transaction.bundleId == "com.goodheartapp")
        #expect(transaction.productId == "gh_super_good_ticket_1")
        #expect(transaction.purchaseDate == Date(ms: 1738645560000))
        #expect(transaction.originalPurchaseDate == Date(ms: 1738645560000))
        #expect(transaction.quantity == 1)
        #expect(transaction.type == .consumable)
        #expect(transaction.inAppOwnershipType == .purchased)
        #expect(transaction.signedDate == Date(ms: 1739161772561))
        #expect(transaction.environment == .sandbox)
        #expect(transaction.transactionReason == .purchase)
        #expect(transaction.storefront == "JPN" && transaction.storefrontId == "143462")
        #expect(transaction.price == 230000 && transaction.currency == "JPY")
    }

    @Test func expiredSubscriptionStatus() async throws {
        let verifier = try Self.verifier()
        let transaction = try await verifier.verify(
            Self.text("real/gopay-statuses-signedTransactionInfo-EXPIRED-sandbox.jws"), as: JWSTransaction.self, environment: .host(.sandbox))
        #expect(transaction.transactionId == "2000000191896422")
        #expect(transaction.originalTransactionId == "2000000184445477")
        #expect(transaction.webOrderLineItemId == "2000000014019133")
        #expect(transaction.bundleId == "Com.VoiceRecording.Telephone")
        #expect(transaction.productId == "Com.VoiceRecording.Telephone.103")
        #expect(transaction.subscriptionGroupIdentifier == "21024612")
        #expect(transaction.appAccountToken == "e4b2c0ab-07a9-4e12-91c9-a76d7d51b72e")
        #expect(transaction.purchaseDate == Date(ms: 1667389704000))
        #expect(transaction.originalPurchaseDate == Date(ms: 1666615875000))
        #expect(transaction.expiresDate == Date(ms: 1667391504000))
        let renewal = try await verifier.verify(
            Self.text("real/gopay-statuses-signedRenewalInfo-EXPIRED-sandbox.jws"), as: JWSRenewalInfo.self, environment: .host(.sandbox))
        #expect(renewal.expirationIntent == .customerCancelled)
        #expect(renewal.autoRenewStatus == .off)
        #expect(renewal.isInBillingRetryPeriod == false)
        #expect(renewal.originalTransactionId == "2000000184445477")
        #expect(renewal.recentSubscriptionStartDate == Date(ms: 1667369895000))
        #expect(renewal.signedDate == Date(ms: 1667561039251))
    }

    @Test func introductoryOfferFromHistory() async throws {
        let transaction = try await Self.verifier().verify(
            Self.text("real/gopay-history-signedTransaction-sandbox.jws"), as: JWSTransaction.self, environment: .host(.sandbox))
        #expect(transaction.transactionId == "2000000184445477" && transaction.originalTransactionId == "2000000184445477")
        #expect(transaction.webOrderLineItemId == "2000000013429558")
        #expect(transaction.offerType == 1)
        #expect(transaction.appAccountToken == "207262da-1ac8-4e0a-a399-5aa62a82800f")
        #expect(transaction.purchaseDate == Date(ms: 1666615873000))
        #expect(transaction.originalPurchaseDate == Date(ms: 1666615875000))
        #expect(transaction.expiresDate == Date(ms: 1666615993000))
        // An introductory offer without offerDiscountType: whether it was a free trial is unknown.
        #expect(transaction.ledgerTransaction.isTrialPeriod == nil)
    }

    @Test func renewalInfoCarriesNoBundleId() async throws {
        let renewal = try await Self.verifier(bundles: ["com.other"]).verify(
            Self.text("real/goiap-signedRenewalInfo-sandbox.jws"), as: JWSRenewalInfo.self, environment: .host(.sandbox))
        #expect(renewal.originalTransactionId == "2000000335310644")
        #expect(renewal.autoRenewProductId == "co.ringalarm.swtich.quarterly2" && renewal.productId == "co.ringalarm.swtich.quarterly2")
        #expect(renewal.autoRenewStatus == .on)
        #expect(renewal.recentSubscriptionStartDate == Date(ms: 1684822738000))
        #expect(renewal.signedDate == Date(ms: 1684822778492))
    }

    /// 2021 transactions name no environment; the wrapper's bundleId was masked by its author, the
    /// signed payloads say the truth.
    @Test func historyOf2021WithoutEnvironment() async throws {
        let body = try JSONSerialization.jsonObject(with: Fixtures.data("asapi/real/omnimind-get_transaction_history-sandbox.json")) as! [String: Any]
        let signed = body["signedTransactions"] as! [String]
        let verifier = try Self.verifier(bundles: ["club.omnichess.ios"])
        var transactions: [JWSTransaction] = []
        for jws in signed {
            transactions.append(try await verifier.verify(jws, as: JWSTransaction.self, environment: .host(.sandbox)))
        }
        #expect(transactions.map(\.transactionId) == ["1000000906235058", "1000000906239564", "1000000906242618", "1000000906245876", "1000000906249606"])
        #expect(transactions.map(\.webOrderLineItemId) == ["1000000067751977", "1000000067751978", "1000000067752252", "1000000067752521", "1000000067752820"])
        #expect(transactions.map(\.purchaseDate) == [1636370960000, 1636371260000, 1636371560000, 1636371860000, 1636372160000].map { Date(ms: $0) })
        #expect(transactions.map(\.expiresDate) == [1636371260000, 1636371560000, 1636371860000, 1636372160000, 1636372460000].map { Date(ms: $0) })
        #expect(transactions.allSatisfy { $0.environment == nil && $0.originalTransactionId == "1000000906235058" && $0.bundleId == "club.omnichess.ios" })
        #expect(transactions.allSatisfy { $0.originalPurchaseDate == Date(ms: 1636370961000) && $0.productId == "omnichess_monthly_subscription" })
        // The masked wrapper's bundle id is not the signed one.
        await #expect(throws: SignedDataRejection.self) {
            try await Self.verifier(bundles: ["com.test.app"]).verify(signed[0], as: JWSTransaction.self, environment: .host(.sandbox))
        }
    }

    @Test func subscriptionStatusesOf2021() async throws {
        let body = try JSONSerialization.jsonObject(with: Fixtures.data("asapi/real/omnimind-get_all_subscription_statuses-sandbox.json")) as! [String: Any]
        let last = ((body["data"] as! [[String: Any]])[0]["lastTransactions"] as! [[String: Any]])[0]
        let verifier = try Self.verifier(bundles: ["club.omnichess.ios"])
        let transaction = try await verifier.verify(last["signedTransactionInfo"] as! String, as: JWSTransaction.self, environment: .host(.sandbox))
        let renewal = try await verifier.verify(last["signedRenewalInfo"] as! String, as: JWSRenewalInfo.self, environment: .host(.sandbox))
        #expect(transaction.transactionId == "1000000907182138" && transaction.originalTransactionId == "1000000906235058")
        #expect(transaction.webOrderLineItemId == "1000000067821817")
        #expect(transaction.purchaseDate == Date(ms: 1636462359000) && transaction.expiresDate == Date(ms: 1636462659000))
        #expect(transaction.signedDate == Date(ms: 1636464323732))
        #expect(renewal.originalTransactionId == "1000000906235058")
        #expect(renewal.expirationIntent == .customerCancelled && renewal.autoRenewStatus == .off && renewal.isInBillingRetryPeriod == false)
    }

    /// Sandbox data must not pass for production data.
    @Test func environmentMustBeTheHosts() async throws {
        let examination = try await Self.verifier().examine(
            Self.text("real/mingos-signedTransaction-consumable-JPY-sandbox.jws"), as: JWSTransaction.self, environment: .host(.production))
        #expect(examination.firstFailure?.check == .environment)
    }

    // MARK: One byte changed

    /// Every real JWS here, with what it is.
    static let realJWS: [(file: String, kind: String)] = [
        ("real/mingos-signedTransaction-consumable-JPY-sandbox.jws", "transaction"),
        ("real/gopay-statuses-signedTransactionInfo-EXPIRED-sandbox.jws", "transaction"),
        ("real/gopay-history-signedTransaction-sandbox.jws", "transaction"),
        ("real/gopay-statuses-signedRenewalInfo-EXPIRED-sandbox.jws", "renewal"),
        ("real/goiap-signedRenewalInfo-sandbox.jws", "renewal"),
        ("real/gopay-signedPayload-CONSUMPTION_REQUEST-production.jws", "notification"),
    ]

    static func firstFailure(_ jws: String, kind: String, verifier: SignedDataVerifier) async -> SignedDataCheck? {
        switch kind {
        case "transaction": await verifier.examine(jws, as: JWSTransaction.self, environment: .either).firstFailure?.check
        case "renewal": await verifier.examine(jws, as: JWSRenewalInfo.self, environment: .either).firstFailure?.check
        default: await verifier.examine(jws, as: NotificationV2Payload.self, environment: .either).firstFailure?.check
        }
    }

    @Test(arguments: realJWS)
    func verifiesAsItCame(file: String, kind: String) async throws {
        #expect(await Self.firstFailure(try Self.text(file), kind: kind, verifier: try Self.verifier()) == nil)
    }

    @Test(arguments: realJWS)
    func aChangedPayloadByteFailsTheSignature(file: String, kind: String) async throws {
        let jws = try JWSParts(Self.text(file))
        // One character of an id changed keeps the JSON valid and every claim true: only the
        // signature can tell.
        var payload = jws.payload
        let key = Array((kind == "notification" ? "\"notificationUUID\":\"" : "\"originalTransactionId\":\"").utf8)
        let start = try #require((0..<(payload.count - key.count)).first { Array(payload[$0..<($0 + key.count)]) == key })
        let index = start + key.count
        payload[index] = payload[index] == UInt8(ascii: "9") ? UInt8(ascii: "8") : UInt8(ascii: "9")
        let changed = jws.with(payload: payload)
        #expect(await Self.firstFailure(changed, kind: kind, verifier: try Self.verifier()) == .signature)
    }

    @Test(arguments: realJWS)
    func aChangedSignatureByteFailsTheSignature(file: String, kind: String) async throws {
        let jws = try JWSParts(Self.text(file))
        var signature = jws.signature
        signature[17] ^= 0x01
        #expect(await Self.firstFailure(jws.with(signature: signature), kind: kind, verifier: try Self.verifier()) == .signature)
    }

    @Test(arguments: realJWS)
    func aChangedChainByteFailsTheChain(file: String, kind: String) async throws {
        let jws = try JWSParts(Self.text(file))
        // The last byte of the leaf is inside its signature by the intermediate.
        var leaf = jws.certificates[0]
        leaf[leaf.count - 1] ^= 0x01
        #expect(await Self.firstFailure(jws.with(leaf: leaf), kind: kind, verifier: try Self.verifier()) == .chain)
    }

    @Test(arguments: realJWS)
    func anotherRootFailsTheChain(file: String, kind: String) async throws {
        let testRoot = try Fixtures.bytes("asapi/apple-lib/swift/certs/testCA.der")
        #expect(await Self.firstFailure(try Self.text(file), kind: kind, verifier: try Self.verifier(roots: [testRoot])) == .chain)
    }

    /// The leaves have expired since: the certificates are checked at the payload's signedDate,
    /// so a payload claiming to be signed now fails validity (and, being changed, the signature).
    @Test func validityIsCheckedAtTheSignedDate() async throws {
        let jws = try JWSParts(Self.text("real/mingos-signedTransaction-consumable-JPY-sandbox.jws"))
        let payload = String(decoding: jws.payload, as: UTF8.self)
            .replacingOccurrences(of: "\"signedDate\":1739161772561", with: "\"signedDate\":\(Date().milliseconds)")
        let examination = try await Self.verifier().examine(jws.with(payload: Array(payload.utf8)), as: JWSTransaction.self, environment: .either)
        #expect(examination.firstFailure?.check == .validity)
        #expect(examination.results.first { $0.check == .signature }?.passed == false)
    }

    // MARK: Rejected by every verifier

    @Test func algorithmRewrittenToHS256() async throws {
        let examination = try await Self.verifier(bundles: ["com.example"]).examine(
            Self.text("real/negative/mimo-real-chain-header-rewritten-alg-HS256.txt"), as: NotificationV2Payload.self, environment: .either)
        #expect(examination.firstFailure?.check == .algorithm)
        #expect(examination.results.first { $0.check == .signature }?.passed == false)
    }

    @Test func leafReplacedByTheIntermediate() async throws {
        let examination = try await Self.verifier(bundles: ["com.getmimo.mimo"]).examine(
            Self.text("real/negative/mimo-real-chain-x5c0-replaced-by-intermediate.txt"), as: NotificationV2Payload.self, environment: .either)
        #expect(examination.firstFailure?.check == .chain)
        #expect(examination.results.first { $0.check == .oid }?.passed == false)
        #expect(examination.results.first { $0.check == .signature }?.passed == false)
    }
}

/// A compact JWS taken apart to change one byte and put back together.
struct JWSParts {
    var header: [String: Any]
    var headerText: String
    var payload: [UInt8]
    var signature: [UInt8]

    init(_ text: String) throws {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        headerText = parts[0]
        header = try JSONSerialization.jsonObject(with: Data(Base64URL.decode(Array(parts[0].utf8))!)) as! [String: Any]
        payload = Base64URL.decode(Array(parts[1].utf8))!
        signature = Base64URL.decode(Array(parts[2].utf8))!
    }

    var certificates: [[UInt8]] {
        (header["x5c"] as! [String]).map { Array(Data(base64Encoded: $0)!) }
    }

    func with(payload: [UInt8]? = nil, signature: [UInt8]? = nil, leaf: [UInt8]? = nil) -> String {
        var headerText = self.headerText
        if let leaf {
            var header = self.header
            var chain = header["x5c"] as! [String]
            chain[0] = Data(leaf).base64EncodedString()
            header["x5c"] = chain
            headerText = Base64URL.encode(try! JSONSerialization.data(withJSONObject: header))
        }
        return [headerText, Base64URL.encode(payload ?? self.payload), Base64URL.encode(signature ?? self.signature)].joined(separator: ".")
    }
}
