import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The boundary sweep over the decoders of Apple's unsigned JSON (docs/guarantees.md, "Hostile
/// input"): each boundary value in every field of a verifyReceipt answer (its `receipt`, `in_app`,
/// `latest_receipt_info` and `pending_renewal_info`), a legacy answer, a v1 notification and the
/// App Store Server API's bodies. None may trap; each is accepted, or a format error that names
/// the field. The signed payloads are swept in SignedDataTests, through the verifier.
@Suite struct BoundarySweepTests {
    /// A decoder of outside JSON, with the document it reads.
    enum Decoder: String, CaseIterable, CustomStringConvertible {
        case verifyReceipt, legacyVerifyReceipt, notificationV1, transactionHistory, subscriptionStatuses, notificationHistory
        case serverAPIError

        var description: String { rawValue }

        var document: BoundarySweep.Document {
            switch self {
            case .verifyReceipt: BoundarySweep.verifyReceiptAnswer
            case .legacyVerifyReceipt: BoundarySweep.legacyVerifyReceiptAnswer
            case .notificationV1: BoundarySweep.notificationV1
            case .transactionHistory: BoundarySweep.transactionHistory
            case .subscriptionStatuses: BoundarySweep.subscriptionStatuses
            case .notificationHistory: BoundarySweep.notificationHistory
            case .serverAPIError: BoundarySweep.serverAPIError
            }
        }

        func decode(_ json: String) throws {
            let bytes = Array(json.utf8)
            switch self {
            case .verifyReceipt, .legacyVerifyReceipt: _ = try VerifyReceiptResponse.decode(bytes)
            case .notificationV1: _ = try ServerNotification.decode(bytes)
            case .transactionHistory: _ = try TransactionHistoryResponse.decode(bytes)
            case .subscriptionStatuses: _ = try SubscriptionStatusesResponse.decode(bytes)
            case .notificationHistory: _ = try NotificationHistoryResponse.decode(bytes)
            // Total by design: a body that is no error body reads as none (the status speaks then).
            case .serverAPIError: _ = ServerAPIError.decode(bytes)
            }
        }
    }

    /// The sweep starts from documents the decoders accept whole, or it would prove nothing.
    @Test(arguments: Decoder.allCases) func theDocumentBeforeTheSweepDecodes(_ decoder: Decoder) throws {
        try decoder.decode(decoder.document.root.json)
    }

    @Test(arguments: Decoder.allCases) func everyBoundaryValueInEveryFieldIsAcceptedOrAnErrorNamingIt(_ decoder: Decoder) {
        var accepted = 0
        var unnamed: [String] = []
        for variant in decoder.document.variants {
            do {
                try decoder.decode(variant.json)
                accepted += 1
            } catch {
                if !"\(error)".contains(variant.key) { unnamed.append("\(variant.label): \(error)") }
            }
        }
        #expect(unnamed.isEmpty, "errors that do not name their field: \(unnamed.prefix(8))")
        // Both outcomes occur (a sweep whose every value is refused, or taken, proves little),
        // but for the error body, which reads whatever it can and is never refused.
        #expect(accepted > 0 && (accepted < decoder.document.variants.count || decoder == .serverAPIError))
    }

    /// The sweep covers every member name a decoder reads: a field added to a decoder and not to
    /// the sweep fails here. Only the JWS header's `alg` and `x5c` (text, verified as the chain)
    /// are left out, and the containers, whose members are swept.
    @Test func everyKeyTheDecodersReadIsSwept() throws {
        let swept = [
            BoundarySweep.verifyReceiptAnswer, BoundarySweep.legacyVerifyReceiptAnswer, BoundarySweep.notificationV1,
            BoundarySweep.transactionHistory, BoundarySweep.subscriptionStatuses, BoundarySweep.notificationHistory,
            BoundarySweep.serverAPIError, BoundarySweep.signedTransaction, BoundarySweep.signedRenewalInfo,
            BoundarySweep.notificationV2(signedTransactionInfo: "", signedRenewalInfo: ""),
        ].reduce(into: Set<String>()) { $0.formUnion($1.keys) }
        let decoded = try BoundarySweep.decodedKeys()
        #expect(decoded["VerifyReceiptResponse.swift"]?.contains("expires_date_ms") == true, "the source scan found nothing")
        #expect(decoded["SignedPayloads.swift"]?.contains("quantity") == true, "the source scan found nothing")
        var missing: [String] = []
        for (file, keys) in decoded {
            for key in keys.subtracting(swept) where !(file == "CompactJWS.swift" && ["alg", "x5c"].contains(key)) {
                missing.append("\(file): \(key)")
            }
        }
        #expect(missing.isEmpty, "decoded but not swept: \(missing.sorted())")
    }
}
