import AppStoreModels
import Foundation
import Hashing
import Reconciliation
import Testing
import TestSupport

/// A random account: chains of subscriptions of one group, passes and one-time purchases, with
/// renewal entries, spread over the receipts of several devices. Times in days from `Build.now`.
struct RandomAccount {
    struct Purchase {
        var id: String
        var product: String
        var original: String
        var purchased: Double
        var expires: Double?
        var cancelled: Double?
        var upgraded = false
        var ownership = "PURCHASED"
    }

    struct Renewal {
        /// nil: an entry without `original_transaction_id`, as some real answers carry.
        var original: String?
        var product: String
        var renewsTo: String
        var autoRenew: Bool
        var grace: Double?
        var retrying: Bool
    }

    var purchases: [Purchase] = []
    var renewals: [Renewal] = []
    var nextId = 1

    static let subscriptions = ["pro.monthly", "pro.yearly", "premium", "basic"]

    mutating func id() -> String {
        defer { nextId += 1 }
        return "\(1_000 + nextId)"
    }

    /// A subscription chain of `periods` 30-day periods ending `end` days from now.
    mutating func addChain(product: String, end: Double, periods: Int, cancelledLast: Double? = nil, upgraded: Bool = false,
                           ownership: String = "PURCHASED") -> String {
        let original = id()
        for period in 0..<periods {
            let expires = end - Double(periods - 1 - period) * 30
            let last = period == periods - 1
            purchases.append(Purchase(
                id: period == 0 ? original : id(), product: product, original: original, purchased: expires - 30, expires: expires,
                cancelled: last ? cancelledLast : nil, upgraded: last && upgraded, ownership: ownership))
        }
        return original
    }

    static func random(_ rng: inout SplitMix64, keyedRenewalsOnly: Bool = false) -> RandomAccount {
        var account = RandomAccount()
        for _ in 0..<Int.random(in: 0...3, using: &rng) {
            let product = subscriptions.randomElement(using: &rng)!
            let end = Double(Int.random(in: -60...40, using: &rng))
            let cancelled: Double? = Bool.random(using: &rng) && Int.random(in: 0..<4, using: &rng) == 0
                ? min(end - 1, Double(Int.random(in: -20 ... -1, using: &rng))) : nil
            let original = account.addChain(
                product: product, end: end, periods: Int.random(in: 1...3, using: &rng), cancelledLast: cancelled,
                upgraded: Int.random(in: 0..<8, using: &rng) == 0, ownership: Bool.random(using: &rng) ? "PURCHASED" : "FAMILY_SHARED")
            if Int.random(in: 0..<10, using: &rng) < 7 {
                let keyed = keyedRenewalsOnly || Int.random(in: 0..<5, using: &rng) > 0
                account.renewals.append(Renewal(
                    original: keyed ? original : nil, product: product,
                    renewsTo: Bool.random(using: &rng) ? product : subscriptions.randomElement(using: &rng)!,
                    autoRenew: Bool.random(using: &rng),
                    grace: Bool.random(using: &rng) ? Double(Int.random(in: -5...10, using: &rng)) : nil,
                    retrying: Bool.random(using: &rng)))
            }
        }
        for _ in 0..<Int.random(in: 0...3, using: &rng) {
            let original = account.id()
            account.purchases.append(Purchase(
                id: original, product: Bool.random(using: &rng) ? "season" : "lifetime", original: original,
                purchased: Double(Int.random(in: -70 ... -1, using: &rng)),
                cancelled: Int.random(in: 0..<3, using: &rng) == 0 ? -0.5 : nil))
        }
        return account
    }

    /// The account as verifyReceipt answers for `devices` receipts: each transaction in the
    /// `latest_receipt_info` of at least one, sometimes also in another's `in_app`; each renewal
    /// entry in at least one, sometimes in two (the same entry twice).
    func verifyReceiptAnswers(devices: Int, _ rng: inout SplitMix64) throws -> [VerifiedFacts] {
        var latest = Array(repeating: [[String: Any]](), count: devices)
        var inApp = Array(repeating: [[String: Any]](), count: devices)
        var pending = Array(repeating: [[String: Any]](), count: devices)
        for purchase in purchases {
            let entry = AppleShaped.transaction(
                purchase.id, purchase.product, original: purchase.original, purchased: purchase.purchased, expires: purchase.expires,
                cancelled: purchase.cancelled, upgraded: purchase.upgraded, ownership: purchase.ownership)
            latest[Int.random(in: 0..<devices, using: &rng)].append(entry)
            if Bool.random(using: &rng) { inApp[Int.random(in: 0..<devices, using: &rng)].append(entry) }
        }
        for renewal in renewals {
            let entry = AppleShaped.renewal(original: renewal.original, product: renewal.product, renewsTo: renewal.renewsTo,
                                            autoRenew: renewal.autoRenew, grace: renewal.grace, retrying: renewal.retrying)
            pending[Int.random(in: 0..<devices, using: &rng)].append(entry)
            if Bool.random(using: &rng) { pending[Int.random(in: 0..<devices, using: &rng)].append(entry) }
        }
        return try (0..<devices).map {
            try AppleShaped.answer(id: Int64($0 + 1), latest: latest[$0].shuffled(using: &rng), inApp: inApp[$0].shuffled(using: &rng),
                                   pending: pending[$0].shuffled(using: &rng))
        }
    }

    /// The same account as the App Store Server API signs it: every transaction and renewal info,
    /// in pages in any order.
    func serverAPIAnswer(_ rng: inout SplitMix64) throws -> VerifiedFacts {
        let transactions = try purchases.shuffled(using: &rng).map { purchase in
            try SignedShaped.transaction(
                purchase.id, purchase.product, original: purchase.original, purchased: purchase.purchased, expires: purchase.expires,
                cancelled: purchase.cancelled, upgraded: purchase.upgraded, ownership: purchase.ownership,
                type: purchase.product == "season" ? SignedProductType.nonRenewing.rawValue : nil)
        }
        let infos = try renewals.shuffled(using: &rng).map { renewal in
            try SignedShaped.renewal(original: renewal.original ?? "", product: renewal.product, renewsTo: renewal.renewsTo,
                                     autoRenew: renewal.autoRenew, grace: renewal.grace, retrying: renewal.retrying)
        }
        return VerifiedFacts(receiptId: nil, signedTransactions: transactions, renewalInfos: infos, environment: .production)
    }
}

/// Properties of the entitlement rules over random accounts (docs/guarantees.md, "Entitlement
/// rules"): what the rules decide depends on Apple's facts, never on how many copies came, in what
/// order, through which source, or on chains that grant nothing.
@Suite struct ChainPropertyTests {
    static let worlds = 400

    static func decide(_ receipts: [VerifiedFacts]) -> [Entitlement] {
        EntitlementRules(catalog: AppleShaped.catalog).entitlements(accountId: "acct", receipts: receipts, now: Build.now)
    }

    /// Adding a chain that is expired, refunded or revoked (or a refunded pass or purchase) never
    /// takes away an entitlement another chain grants, nor shortens it.
    @Test func aChainThatGrantsNothingTakesNothingAway() throws {
        var rng = SplitMix64(seed: 50_001)
        for world in 0..<Self.worlds {
            var account = RandomAccount.random(&rng)
            var copy = rng
            let before = Self.decide(try account.verifyReceiptAnswers(devices: 2, &copy))
            let product = (RandomAccount.subscriptions + ["season", "lifetime"]).randomElement(using: &rng)!
            switch product {
            case "season", "lifetime":
                let original = account.id()
                account.purchases.append(.init(id: original, product: product, original: original,
                                               purchased: Double(Int.random(in: -20 ... -1, using: &rng)), cancelled: -0.5))
            default:
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: _ = account.addChain(product: product, end: Double(Int.random(in: -40 ... -1, using: &rng)), periods: 2)
                case 1: _ = account.addChain(product: product, end: 60, periods: 1, cancelledLast: -1)
                default: _ = account.addChain(product: product, end: 60, periods: 1, cancelledLast: -1, ownership: "FAMILY_SHARED")
                }
            }
            copy = rng
            let after = Dictionary(uniqueKeysWithValues: Self.decide(try account.verifyReceiptAnswers(devices: 2, &copy)).map { ($0.productId, $0) })
            for granted in before where granted.entitled {
                let now = try #require(after[granted.productId], "world \(world): \(granted.productId) vanished")
                #expect(now.entitled, "world \(world): adding a chain that grants nothing revoked \(granted.productId)")
                #expect((now.expiresAt ?? .distantFuture) >= (granted.expiresAt ?? .distantFuture), "world \(world): \(granted.productId) shortened")
            }
        }
    }

    /// The same facts twice (a receipt of a second device, a renewal entry repeated) change nothing,
    /// and neither does the order of `in_app`, `latest_receipt_info`, the renewal entries or the receipts.
    @Test func copiesAndOrderChangeNothing() throws {
        var rng = SplitMix64(seed: 50_002)
        for world in 0..<Self.worlds {
            let account = RandomAccount.random(&rng)
            let receipts = try account.verifyReceiptAnswers(devices: Int.random(in: 1...3, using: &rng), &rng)
            let expected = Self.decide(receipts)
            // Another draw of the same account: every array in another order, copies elsewhere.
            #expect(Self.decide(try account.verifyReceiptAnswers(devices: Int.random(in: 1...3, using: &rng), &rng)) == expected,
                    "world \(world): another spread over receipts")
            #expect(Self.decide(receipts.reversed()) == expected, "world \(world): receipts reversed")
            var duplicated = receipts
            duplicated.append(receipts.randomElement(using: &rng)!)
            #expect(Self.decide(duplicated) == expected, "world \(world): a receipt twice")
            var repeated = receipts
            let index = Int.random(in: 0..<repeated.count, using: &rng)
            repeated[index].renewals += repeated[index].renewals
            repeated[index].transactions += repeated[index].transactions.shuffled(using: &rng)
            #expect(Self.decide(repeated) == expected, "world \(world): renewal entries and transactions twice")
        }
    }

    /// The same account through verifyReceipt and through the App Store Server API (its history
    /// pages in any order) gives the same entitlements.
    @Test func bothSourcesGiveTheSameEntitlements() throws {
        var rng = SplitMix64(seed: 50_003)
        for world in 0..<Self.worlds {
            let account = RandomAccount.random(&rng, keyedRenewalsOnly: true)
            let byVerifyReceipt = Self.decide(try account.verifyReceiptAnswers(devices: Int.random(in: 1...2, using: &rng), &rng))
            let byServerAPI = Self.decide([try account.serverAPIAnswer(&rng)])
            #expect(byServerAPI == byVerifyReceipt, "world \(world)")
            // Pages read in two answers (two originals asked) are the same facts.
            let split = try account.serverAPIAnswer(&rng)
            var first = split, second = split
            let half = split.transactions.count / 2
            first.transactions = Array(split.transactions.prefix(half))
            second.transactions = Array(split.transactions.dropFirst(half))
            #expect(Self.decide([second, first]) == byVerifyReceipt, "world \(world): history in two answers")
        }
    }
}
