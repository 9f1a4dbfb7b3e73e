import AppStoreModels
import Foundation
import Reconciliation
import Testing
import TestSupport

/// The seam between Apple's sources: real signed data, as facts, meets the same rules as a
/// verifyReceipt answer, and the same purchase said by either source gives the same entitlement.
@Suite struct SignedFactsTests {
    /// A real JWS's payload (verification is SignedData's job, tested there).
    static func payload<Payload: SignedPayload>(_ file: String, as type: Payload.Type) throws -> Payload {
        let text = String(decoding: try Fixtures.bytes("asapi/real/" + file), as: UTF8.self)
        return try Payload(json: try CompactJWS(text).payload)
    }

    @Test func aRealExpiredSubscriptionWithAutoRenewOff() throws {
        let transaction = try Self.payload("gopay-statuses-signedTransactionInfo-EXPIRED-sandbox.jws", as: JWSTransaction.self)
        let renewal = try Self.payload("gopay-statuses-signedRenewalInfo-EXPIRED-sandbox.jws", as: JWSRenewalInfo.self)
        let facts = VerifiedFacts(receiptId: nil, signedTransactions: [transaction], renewalInfos: [renewal], environment: .sandbox)
        let now = Date(ms: 1667561039251)  // when Apple signed it: the subscription had expired
        let entitlements = EntitlementRules().entitlements(accountId: "a", receipts: [facts], now: now)
        #expect(entitlements.count == 1)
        let entitlement = try #require(entitlements.first)
        #expect(entitlement.productId == "Com.VoiceRecording.Telephone.103")
        #expect(entitlement.state == .expired)
        #expect(entitlement.originalTransactionId == "2000000184445477" && entitlement.latestTransactionId == "2000000191896422")
        #expect(entitlement.expiresAt == Date(ms: 1667391504000))
        #expect(entitlement.autoRenew == false)
        #expect(entitlement.environment == "Sandbox")
        // Half an hour before it expired, the same facts grant it.
        let before = EntitlementRules().entitlements(accountId: "a", receipts: [facts], now: Date(ms: 1667391504000 - 1_800_000))
        #expect(before.first?.state == .active)
    }

    @Test func aRealConsumableGrantsNothingButIsInTheUnion() throws {
        let transaction = try Self.payload("mingos-signedTransaction-consumable-JPY-sandbox.jws", as: JWSTransaction.self)
        let facts = VerifiedFacts(receiptId: nil, signedTransactions: [transaction], renewalInfos: [], environment: .sandbox)
        let rules = EntitlementRules(catalog: ["gh_super_good_ticket_1": Product(productId: "gh_super_good_ticket_1", type: .consumable)])
        #expect(rules.entitlements(accountId: "a", receipts: [facts], now: Date()).isEmpty)
        let union = EntitlementRules.union([facts])
        #expect(union.map(\.transaction.transactionId) == ["2000000847061981"])
        #expect(union.first?.source == .serverAPI)
    }

    /// The same refunded subscription, said by verifyReceipt and by signed data: one entitlement.
    @Test func bothSourcesGiveTheSameEntitlement() throws {
        let purchased = Build.day(-20), expires = Build.day(10), refunded = Build.day(-1)
        let signed = try JWSTransaction(json: Array("""
            {"transactionId":"7","originalTransactionId":"7","productId":"pro.monthly","purchaseDate":\(purchased.milliseconds),
             "expiresDate":\(expires.milliseconds),"revocationDate":\(refunded.milliseconds),"revocationReason":1,
             "inAppOwnershipType":"PURCHASED","type":"Auto-Renewable Subscription"}
            """.utf8))
        let renewal = try JWSRenewalInfo(json: Array(#"{"originalTransactionId":"7","autoRenewProductId":"pro.monthly","autoRenewStatus":0}"#.utf8))
        let fromSignedData = VerifiedFacts(receiptId: nil, signedTransactions: [signed], renewalInfos: [renewal], environment: .production)
        let answer = VerifyReceiptResponse(
            status: 0, environment: "Production", receipt: Receipt(bundleId: "com.example", inApp: []),
            latestReceiptInfo: [Build.tx("7", purchased: -20, expires: 10, cancelled: -1, reason: 1)],
            pendingRenewalInfo: [PendingRenewalInfo(originalTransactionId: "7", autoRenewProductId: "pro.monthly", autoRenewStatus: false)])
        let fromVerifyReceipt = VerifiedFacts(receiptId: 1, response: answer, environment: .production)
        let rules = EntitlementRules()
        let signedEntitlements = rules.entitlements(accountId: "a", receipts: [fromSignedData], now: Build.now)
        #expect(signedEntitlements == rules.entitlements(accountId: "a", receipts: [fromVerifyReceipt], now: Build.now))
        #expect(signedEntitlements.first?.state == .refunded && signedEntitlements.first?.refundedAt == refunded)
    }
}
