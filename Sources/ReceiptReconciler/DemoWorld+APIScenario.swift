import AppleSimulator
import AppStoreModels
import Foundation
import Storage
import Reconciliation

extension DemoWorld {
    /// The Server API's view of the same accounts (`simulate-apple --scenario`): every synthetic
    /// receipt, two deliberate disagreements, on the renewed and the auto-renew-off accounts, and
    /// in Get Notification History a refund the app server never stored (of the consumables
    /// account's second purchase), which only the delta feed brings.
    func writeAPIScenario(accounts: Int, to url: URL) throws {
        let blobs = try (0..<accounts).flatMap { try account($0).receipts.map(\.latestReceipt) }
        func original(_ kind: Kind) -> String { String(2_000_000_000_000 + Self.schedule.firstIndex(of: kind)! * 1000) }
        // Apple signs each product's type; the simulator signs the catalog's.
        let types = Dictionary(uniqueKeysWithValues: Self.catalog.map { ($0.productId, $0.type.signedType.rawValue) })
        var api: [String: Any] = ["from_receipts": blobs, "product_types": types]
        // The bench profile's world is its own: no staged disagreement or notification.
        if profile == .demo {
            api["disagreements"] = [original(.renewedAgain): ["refund": true], original(.autoRenewOff): ["expires_shift_days": 3]]
            // The unchanged subscriber (acct-0000001) pays 4.49 EUR a month: Apple's signed data says
            // so, verifyReceipt never does (the demo shows the journal's adjustment when it is learned).
            api["signed_terms"] = Dictionary(uniqueKeysWithValues: (1...24).map {
                (original(.unchanged) + String(format: "%03d", $0), ["price": 4490, "currency": "EUR", "storefront": "DEU"] as [String: Any])
            })
        }
        if profile == .demo && accounts > Self.schedule.firstIndex(of: .consumables)! {
            let nowMs = Int64(now.timeIntervalSince1970 * 1000)
            let purchase = original(.consumables) + "1"
            api["notifications"] = [[
                "notificationType": "REFUND", "signedDate": nowMs - 2 * 3_600_000,
                "data": ["bundleId": "com.example.app", "appAppleId": 1_234_567_890, "environment": "Production", "transactionInfo": [
                    "transactionId": purchase, "originalTransactionId": purchase, "productId": "coins.100", "type": "Consumable",
                    "quantity": 3, "price": 2970, "currency": "EUR", "purchaseDate": nowMs - 86_400_000,
                    "revocationDate": nowMs - 2 * 3_600_000, "revocationReason": 1,
                ] as [String: Any]] as [String: Any],
            ] as [String: Any]]
        }
        try JSONSerialization.data(withJSONObject: ["api": api]).write(to: url, options: .atomic)
    }
}
