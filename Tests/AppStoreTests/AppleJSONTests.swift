@testable import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The hand-written JSON reader: the same documents valid as for Foundation's parser, and Apple's
/// spellings read the way the entitlement rules expect.
@Suite struct AppleJSONTests {
    static func isValid(_ bytes: [UInt8]) -> Bool {
        (try? AppleJSONReader.read(bytes) { try $0.skipValue() }) != nil
    }

    @Test func acceptsExactlyWhatFoundationAccepts() async throws {
        let seeds = try Fixtures.files(in: "verify-responses").map { try Fixtures.bytes("verify-responses/\($0)") }
            + Fixtures.files(in: "notifications").map { try Fixtures.bytes("notifications/\($0)") }
        let seed = FuzzSeed("acceptsExactlyWhatFoundationAccepts")
        let (agreed, valid, disagreements) = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var generator = seed.generator
                var agreed = 0
                var valid = 0
                var disagreements: [String] = []
                let tokens = ["\"", "{", "}", "[", "]", ",", ":", "null", "true", "-0", "1.5e3", "01", "\\u00e9", "\\x", " ", "\u{00}"]
                for index in 0..<4_000 {
                    let bytes = Mutation.json(seeds[index % seeds.count], edits: 1...3, longestCut: 1, truncates: false,
                                                    tokens: tokens, using: &generator)
                    let foundation = (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) != nil
                    let ours = Self.isValid(bytes)
                    if foundation == ours { agreed += 1 } else if disagreements.count < 5 {
                        disagreements.append("foundation \(foundation), ours \(ours): \(Self.difference(bytes))")
                    }
                    if ours { valid += 1 }
                }
                continuation.resume(returning: (agreed, valid, disagreements))
            }
        }
        #expect(agreed == 4_000, "\(disagreements.joined(separator: "\n")); \(seed)")
        #expect(valid > 100 && valid < 3_900, "\(seed)")
    }

    /// Strings are skipped eight bytes at a time while no byte needs a look: each byte that does
    /// (quote, backslash, control, past ASCII, bad UTF-8), at every offset of a word, is still
    /// seen, and the answer is Foundation's.
    @Test func everySpecialByteIsSeenAtEveryOffset() {
        let specials: [[UInt8]] = [[0x22], [0x5C, 0x6E], [0x5C, 0x78], [0x5C], [0x00], [0x1F], [0x7F], [0xC3, 0xA9], [0xFF], [0xC3], [0xE2, 0x82, 0xAC]]
        var disagreements: [String] = []
        for special in specials {
            for offset in 0..<20 {
                let bytes = Array(#"{"latest_receipt": ""#.utf8) + Array(repeating: UInt8(ascii: "A"), count: offset) + special
                    + Array(repeating: UInt8(ascii: "B"), count: 30) + Array(#"", "status": 0}"#.utf8)
                let foundation = (try? JSONSerialization.jsonObject(with: Data(bytes))) != nil
                if Self.isValid(bytes) != foundation { disagreements.append("\(special) at \(offset): Foundation \(foundation)") }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements)")
    }

    /// Where the reader stops, and the bytes around it, for a failure message.
    static func difference(_ bytes: [UInt8]) -> String {
        do {
            try AppleJSONReader.read(bytes) { try $0.skipValue() }
            return "accepted: " + String(decoding: bytes.prefix(400), as: UTF8.self).debugDescription
        } catch {
            let position = Int("\(error)".split(separator: " ").last ?? "") ?? 0
            return "\(error): " + bytes[max(0, position - 40)..<min(bytes.count, position + 40)].map { String(format: "%02x", $0) }.joined()
                + " " + String(decoding: bytes[max(0, position - 40)..<min(bytes.count, position + 40)], as: UTF8.self).debugDescription
        }
    }

    @Test(arguments: [
        #"{"a": 1} x"#, #"{"a": 1,,}"#, #"{,}"#, #"[,]"#, #"{"a" 1}"#, #"[1 2]"#, #"{"a": 01}"#, #"{"a": 1.}"#, #"{"a": -}"#, #"{"a": tru}"#,
        #"{"a": "\x"}"#, #"{"a": "\u12"}"#, "{\"a\": \"\u{01}\"}", #"{"a": "unterminated}"#, #"{"a": [1, 2}"#, "", "   ",
    ])
    func rejectsMalformedDocuments(_ text: String) {
        #expect(!Self.isValid(Array(text.utf8)))
    }

    @Test func rejectsInvalidUTF8AndDeepNesting() {
        #expect(!Self.isValid(Array(#"{"a": ""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)))
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(!Self.isValid(Array(deep.utf8)))
        let fine = String(repeating: "[", count: 60) + String(repeating: "]", count: 60)
        #expect(Self.isValid(Array(fine.utf8)))
    }

    @Test func decodesEscapesAndSkipsAByteOrderMark() throws {
        let body = [0xEF, 0xBB, 0xBF] + Array(#"""
            {"status": 0, "environment": "Sand\u0062ox", "exception": "a\"b\\c\/d\n\t\u00e9\ud83d\ude00",
             "stat\u0075s": 21199}
            """#.utf8)
        let answer = try VerifyReceiptResponse.decode(body)
        #expect(answer.environment == "Sandbox")
        #expect(answer.exception == "a\"b\\c/d\n\té😀")
        #expect(answer.status == 21199)  // an escaped name is the same name; the last one counts
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(#"{"status": 0, "environment": "\ud83d"}"#.utf8)) }
    }

    @Test func readsEverySpellingApplesAnswersUse() throws {
        let answer = try VerifyReceiptResponse.decode(Array(#"""
            {"status": "0", "is_retryable": "1", "latest_expired_receipt_info": {
                "transaction_id": 1000000000000001, "original_transaction_id": 1.0e3, "product_id": "p", "quantity": " 2 ",
                "purchase_date": "2014-06-28 14:47:53 Etc/GMT", "expires_date": "1403966873000",
                "expires_date_ms": "", "cancellation_date_ms": 1403966873000, "cancellation_reason": "1",
                "is_trial_period": "yes", "is_in_intro_offer_period": 0, "is_upgraded": false, "unknown": {"deep": [1, {"x": null}]},
                "web_order_line_item_id": null},
             "pending_renewal_info": [{"auto_renew_status": "false", "grace_period_expires_date_ms": "1403966873000",
                "is_in_billing_retry_period": "1", "expiration_intent": 2}]}
            """#.utf8))
        #expect(answer.status == 0)
        #expect(answer.isRetryable == true)
        let transaction = try #require(answer.latestReceiptInfo.first)
        #expect(transaction.transactionId == "1000000000000001")
        #expect(transaction.originalTransactionId == "1000")
        #expect(transaction.quantity == 2)
        #expect(transaction.purchaseDate == Date(milliseconds: 1_403_966_873_000))
        #expect(transaction.expiresDate == Date(milliseconds: 1_403_966_873_000))
        #expect(transaction.cancellationDate == Date(milliseconds: 1_403_966_873_000))
        #expect(transaction.cancellationReason == 1)
        #expect(transaction.isTrialPeriod == true && transaction.isInIntroOfferPeriod == false && transaction.isUpgraded == false)
        #expect(transaction.webOrderLineItemId == nil)
        let renewal = try #require(answer.pendingRenewalInfo.first)
        #expect(renewal.autoRenewStatus == false && renewal.isInBillingRetryPeriod == true && renewal.expirationIntent == 2)
        #expect(renewal.gracePeriodExpiresDate == Date(milliseconds: 1_403_966_873_000))
    }

    @Test(arguments: [
        #"{"status": "zero"}"#, #"{"status": {}}"#, #"{}"#, #"[]"#, #"{"status": 0, "receipt": "x"}"#,
        #"{"status": 0, "latest_receipt_info": [{"product_id": "p"}]}"#,
        #"{"status": 0, "latest_receipt_info": [{"transaction_id": "1", "product_id": "p", "is_upgraded": "maybe"}]}"#,
        #"{"status": 0, "latest_receipt_info": [{"transaction_id": "1", "product_id": "p", "expires_date_ms": "soon"}]}"#,
        #"{"status": 0, "latest_receipt_info": [{"transaction_id": 1.5, "product_id": "p"}]}"#,
    ])
    func rejectsValuesNoSpellingExplains(_ text: String) {
        #expect(throws: (any Error).self) { try VerifyReceiptResponse.decode(Array(text.utf8)) }
    }

    @Test func aLegacyReceiptIsItsOwnTransaction() throws {
        let answer = try VerifyReceiptResponse.decode(Array(#"""
            {"status": 0, "receipt": {"bid": "com.example", "bvrs": "1.0", "transaction_id": "7", "product_id": "coins",
             "original_purchase_date_ms": "1403966873000", "purchase_date_ms": "1403966873000"}}
            """#.utf8))
        #expect(answer.receipt?.bundleId == "com.example")
        #expect(answer.receipt?.applicationVersion == "1.0")
        #expect(answer.receipt?.originalPurchaseDate == Date(milliseconds: 1_403_966_873_000))
        #expect(answer.receipt?.inApp.map(\.transactionId) == ["7"])
        #expect(answer.receipt?.inApp.first?.originalPurchaseDate == Date(milliseconds: 1_403_966_873_000))
    }

    @Test func aNotificationsUnifiedReceiptWithoutStatusIsReadLeniently() throws {
        let notification = try ServerNotification.decode(Array(#"""
            {"notification_type": "DID_RENEW", "password": "s", "unified_receipt": {"environment": "Production",
             "latest_receipt_info": [{"transaction_id": "2", "original_transaction_id": "1", "product_id": "p"}],
             "pending_renewal_info": [{"auto_renew_status": "maybe"}]}}
            """#.utf8))
        #expect(notification.unifiedReceipt.status == 0)
        #expect(notification.unifiedReceipt.latestReceiptInfo.map(\.transactionId) == ["2"])
        #expect(notification.unifiedReceipt.pendingRenewalInfo.isEmpty)
        #expect(notification.originalTransactionIds == ["1"])
        #expect(throws: ServerNotification.Invalid.self) { try ServerNotification.decode(Array(#"{"notification_type": 5, "unified_receipt": {}}"#.utf8)) }
        #expect(throws: ServerNotification.Invalid.self) { try ServerNotification.decode(Array(#"{"notification_type": "X", "unified_receipt": []}"#.utf8)) }
    }
}
