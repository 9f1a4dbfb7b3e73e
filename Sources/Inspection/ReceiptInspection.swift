import AppStoreModels
import CivilCalendar
import Foundation
import Reconciliation

/// What `inspect` shows of a locally decoded receipt: a table for a person, JSON for tools. Every
/// string in it is whoever made the receipt: escaped in the table, exact in the JSON.
public enum ReceiptInspection {
    public static func json(_ decoded: DecodedReceipt) -> String {
        let document: [String: AnyEncodable]
        switch decoded {
        case .appReceipt(let receipt): document = ["kind": AnyEncodable("app_receipt"), "receipt": AnyEncodable(receipt)]
        case .legacyTransactionReceipt(let legacy): document = ["kind": AnyEncodable("legacy_transaction_receipt"), "receipt": AnyEncodable(legacy)]
        }
        return (try? ProgramJSON.pretty(document)) ?? "{}\n"
    }

    public static func table(_ decoded: DecodedReceipt) -> String {
        func day(_ date: Date?) -> String { date.map { Timestamp.format($0) } ?? "-" }
        // A receipt's strings are whoever made it: escaped, so none can forge a line or reach the terminal raw.
        func text(_ value: String?) -> String { DisplayText.escaped(value ?? "-") }
        switch decoded {
        case .legacyTransactionReceipt(let legacy):
            var output = "iOS 6 transaction receipt (not an app receipt)\n  environment: \(text(legacy.environment))\n"
            for (key, value) in legacy.purchaseInfo.sorted(by: { $0.key < $1.key }) where key != "signature" {
                output += "  \(text(key)): \(text("\(value)"))\n"
            }
            return output
        case .appReceipt(let receipt):
            var output = """
                App receipt
                  receipt type:         \(text(receipt.receiptType))
                  bundle id:            \(text(receipt.bundleId))
                  app version:          \(text(receipt.appVersion))
                  original app version: \(text(receipt.originalAppVersion))
                  created:              \(day(receipt.creationDate))
                  expires:              \(day(receipt.expirationDate))
                  in-app purchases:     \(receipt.inAppPurchases.count)

                """
            if !receipt.inAppPurchases.isEmpty {
                output += "\n  product | transaction | original | purchased | expires | cancelled\n"
                for purchase in receipt.inAppPurchases {
                    output += "  \(text(purchase.productId)) | \(text(purchase.transactionId)) | \(text(purchase.originalTransactionId)) | "
                        + "\(day(purchase.purchaseDate)) | \(day(purchase.expiresDate)) | \(day(purchase.cancellationDate))\n"
                }
            }
            return output
        }
    }
}

/// Lets one dictionary hold differently typed values for JSON.
struct AnyEncodable: Encodable {
    let encodeValue: (any Encoder) throws -> Void
    init(_ value: some Encodable) { encodeValue = value.encode }
    func encode(to encoder: any Encoder) throws { try encodeValue(encoder) }
}
