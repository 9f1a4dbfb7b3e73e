import AppleSimulator
import AppStoreModels
import ArgumentParser
import CivilCalendar
import Foundation
import Hashing
import Postgres
import Reconciliation
import Storage

struct SeedDemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "seed-demo",
        abstract: "Fills an empty database with sample accounts whose receipts simulate-apple understands (for the demo and the benchmark).",
        discussion: """
            Every account gets synthetic receipts (base64 of "simulated-receipt:" + a spec) and, for most, the \
            entitlement rows an app server would have stored, some of them stale on purpose, so a run has \
            something to correct. The demo profile covers every state (renewed, expired, refunded, upgraded, \
            grace period, billing retry, family sharing, lifetime, consumable, non-renewing, sandbox, Apple \
            failures, a malformed blob); the bench profile gives every account a subscription of 1-24 renewals.
            Refuses a database that already has receipts.
            """
    )

    enum Profile: String, ExpressibleByArgument, CaseIterable {
        case demo, bench
    }

    @OptionGroup var database: DatabaseOptions

    @OptionGroup var logging: LoggingOptions

    @Option(help: "How many accounts.")
    var accounts = 300

    @Option(help: "demo (every state) or bench (subscriptions of 1-24 renewals).")
    var profile: Profile = .demo

    enum ReceiptFormat: String, ExpressibleByArgument, CaseIterable {
        case pkcs7, synthetic
    }

    @Option(help: ArgumentHelp(
        "pkcs7: receipts shaped like Apple's (PKCS#7 signed by a demo chain, one in-app record per transaction, a few kilobytes each), so the local decode does its whole work; synthetic: the short base64 of \"simulated-receipt:\" + the spec (the old benchmark world).",
        valueName: "format"))
    var receiptFormat: ReceiptFormat = .pkcs7

    @Option(help: "Seed of the random choices, for a repeatable world.")
    var seed: UInt64 = 42

    @Option(help: ArgumentHelp(
        "Also write a simulate-apple scenario in which the App Store Server API shows the same world, disagreeing with verifyReceipt on purpose for two accounts (a refund only the API knows, a later expiry).",
        valueName: "file"))
    var apiScenario: String?

    @Option(help: ArgumentHelp(
        "The bench profile: write the entitlements each account must have after each night, as CSV (account_id,night,product_id,state,expires_at), for the benchmark's check.",
        valueName: "file"))
    var expectations: String?

    func run() async throws {
        _ = logging.bootstrap()
        let store = SeedStore(connection: try await PostgresConnection.connect(try database.connectionString()))
        guard try await !store.hasReceipts() else {
            throw ValidationError("iap.app_receipts already has rows: seed-demo only fills an empty database")
        }
        var world = DemoWorld(profile: profile, seed: seed, now: Date())
        if receiptFormat == .pkcs7 { world.signer = try SimulatedAppReceipt.Signer(chain: try SigningChain.create()) }
        try await store.load { store in
            try await store.copy(catalog: DemoWorld.catalog)
            var receipts: [SeedStore.Receipt] = []
            var entitlements: [Entitlement] = []
            var expected = ""
            // Signing a receipt takes about a millisecond: accounts are made on every core, a
            // thousand to a task, and written in order.
            let made = world
            let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
            let chunk = 1_000
            for round in stride(from: 0, to: accounts, by: chunk * workers) {
                let ranges = stride(from: round, to: min(accounts, round + chunk * workers), by: chunk).map { $0..<min(accounts, $0 + chunk) }
                let chunks = try await withThrowingTaskGroup(of: (Int, [DemoWorld.Account]).self) { group in
                    for (position, range) in ranges.enumerated() {
                        group.addTask { (position, try range.map { try made.account($0) }) }
                    }
                    var chunks = [[DemoWorld.Account]](repeating: [], count: ranges.count)
                    for try await (position, accounts) in group { chunks[position] = accounts }
                    return chunks
                }
                for account in chunks.joined() {
                    for (night, entitlements) in account.expected.enumerated() {
                        for value in entitlements {
                            expected += "\(account.accountId),\(night + 1),\(value.product),\(value.state),"
                                + (value.expiresMs.map { Timestamp.format(Date(timeIntervalSince1970: Double($0) / 1000)) } ?? "") + "\n"
                        }
                    }
                    receipts += account.receipts
                    entitlements += account.entitlements
                }
                if receipts.count >= 10_000 {
                    try await store.copy(receipts: receipts)
                    receipts.removeAll(keepingCapacity: true)
                }
                if entitlements.count >= 10_000 {
                    try await store.copy(entitlements: entitlements, updatedAt: world.now)
                    entitlements.removeAll(keepingCapacity: true)
                }
            }
            try await store.copy(receipts: receipts)
            try await store.copy(entitlements: entitlements, updatedAt: world.now)
            // The demo app's access is imported, and the import recorded, as docs/adoption.md does it.
            try await store.recordAccessImported()
            if let expectations { try expected.write(toFile: expectations, atomically: true, encoding: .utf8) }
            if let apiScenario { try world.writeAPIScenario(accounts: accounts, to: URL(filePath: apiScenario)) }
            if profile == .demo && accounts > DemoWorld.Kind.allCases.count {  // every kind's account exists
                let secret = ProcessInfo.processInfo.environment["APPLE_SHARED_SECRET"] ?? "demo-shared-secret"
                try await store.copy(notifications: world.notifications(sharedSecret: secret))
            }
        }
        await store.close()
        print("Seeded \(accounts) accounts (\(profile.rawValue) profile).")
    }
}

/// The sample world: deterministic for a seed, relative to `now`.
struct DemoWorld: Sendable {
    let profile: SeedDemoCommand.Profile
    /// Signs real-shaped PKCS#7 receipts; nil writes synthetic ones.
    var signer: SimulatedAppReceipt.Signer? = nil
    let seed: UInt64
    let now: Date

    static let monthMs: Int64 = 30 * 86_400_000

    static let catalog: [Product] = [
        Product(productId: "pro.monthly", type: .autoRenewable, entitlement: "pro", price: Decimal(string: "9.99"), currency: "USD"),
        Product(productId: "pro.yearly", type: .autoRenewable, entitlement: "pro", price: Decimal(string: "79.99"), currency: "USD"),
        Product(productId: "lifetime", type: .nonConsumable, entitlement: "pro", price: Decimal(string: "149.00"), currency: "USD"),
        Product(productId: "coins.100", type: .consumable, price: Decimal(string: "0.99"), currency: "USD"),
        Product(productId: "season.pass", type: .nonRenewing, duration: CalendarDuration(months: 1), entitlement: "pro",
                price: Decimal(string: "4.99"), currency: "EUR"),
    ]

    struct Account: Sendable {
        var accountId: String
        var receipts: [SeedStore.Receipt] = []
        var entitlements: [Entitlement] = []
        /// The bench profile: the entitlements (product, state, expiry) the runs must reach, after
        /// night 1 and after night 2.
        var expected: [[Expected]] = []
    }

    struct Expected: Sendable {
        var product: String
        var state: String
        var expiresMs: Int64?
    }

    /// The states of the demo profile, one per account in turn.
    enum Kind: CaseIterable {
        case renewedStoredStale, unchanged, newPurchase, expiredStoredActive, refunded, upgraded, gracePeriod,
             billingRetry, familyShared, lifetime, consumables, seasonPass, sandbox, appleBusy, appleFailure,
             malformedBlob, twoReceipts, renewedAgain, autoRenewOff, unchangedYearly
    }

    /// Every kind once, then twice the kinds that verify and revoke nothing, so revokes stay under
    /// the default 10% of the verified accounts (docs/guarantees.md, "Safety limit": Apple's
    /// failures count in neither side) and the demo run applies its corrections.
    static let schedule: [Kind] = Kind.allCases + Array(repeating: Kind.allCases.filter {
        ![.expiredStoredActive, .refunded, .upgraded, .appleBusy, .appleFailure, .malformedBlob].contains($0)
    }, count: 2).flatMap { $0 }

    /// A renewal, a refund of a finished consumable (matched once a run has put the purchase in
    /// the ledger), a CONSUMPTION_REQUEST, and a notification with the wrong password.
    func notifications(sharedSecret: String) -> [String] {
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        func original(_ kind: Kind) -> String { String(2_000_000_000_000 + Self.schedule.firstIndex(of: kind)! * 1000) }
        func body(_ type: String, password: String, original: String, transactions: [[String: Any]]) -> String {
            let object: [String: Any] = [
                "notification_type": type, "password": password, "environment": "PROD", "original_transaction_id": original,
                "bid": "com.example.app", "bvrs": "1",
                "unified_receipt": ["status": 0, "environment": "Production", "latest_receipt_info": transactions,
                                    "pending_renewal_info": [], "latest_receipt": ""],
            ]
            return String(decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
        }
        let coins = original(.consumables) + "1"
        let refund: [String: Any] = [
            "transaction_id": coins, "original_transaction_id": coins, "product_id": "coins.100", "quantity": "3",
            "purchase_date_ms": String(nowMs - 86_400_000), "cancellation_date_ms": String(nowMs - 3_600_000),
            "cancellation_reason": "1",
        ]
        return [
            body("DID_RENEW", password: sharedSecret, original: original(.renewedStoredStale), transactions: []),
            body("REFUND", password: sharedSecret, original: coins, transactions: [refund]),
            body("CONSUMPTION_REQUEST", password: sharedSecret, original: coins, transactions: []),
            body("REFUND", password: "not-the-shared-secret", original: original(.lifetime), transactions: []),
        ]
    }

    /// The demo world's account number `index`: its kind from the index, then its receipts, ledger
    /// and stored entitlements. Long on purpose: one short case per kind of account (renewals,
    /// refunds, grace, family sharing...), read as one table of the world the demo shows.
    func account(_ index: Int) throws -> Account {
        var generator = SplitMix64(seed: seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
        let accountId = String(format: "acct-%07d", index)
        let original = String(2_000_000_000_000 + index * 1000)
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        var account = Account(accountId: accountId)

        func blob(_ spec: [String: Any]) throws -> String {
            let json = try JSONSerialization.data(withJSONObject: spec, options: [.sortedKeys])
            // A real-shaped PKCS#7 receipt, or (--receipt-format synthetic) the short synthetic form;
            // a receipt that cannot be signed stops the seeding, never turns into the other form.
            return try signer.map { Data(try SimulatedAppReceipt.make(specJSON: Array(json), signer: $0, creationDate: now)).base64EncodedString() }
                ?? (Data(AppleSimulator.syntheticPrefix.utf8) + json).base64EncodedString()
        }
        func receipt(_ spec: [String: Any]) throws {
            account.receipts.append(SeedStore.Receipt(accountId: accountId, bundleId: "com.example.app", latestReceipt: try blob(spec)))
        }
        func stored(_ product: String, _ state: String, expiresMs: Int64?, latest: String? = nil, environment: String = "Production") {
            account.entitlements.append(Entitlement(
                accountId: accountId, productId: product, originalTransactionId: original, latestTransactionId: latest ?? original,
                state: EntitlementState(rawValue: state)!, expiresAt: expiresMs.map { Date(timeIntervalSince1970: Double($0) / 1000) },
                autoRenew: expiresMs == nil ? nil : true, autoRenewProductId: expiresMs == nil ? nil : product,
                environment: environment, ownershipType: "PURCHASED"))
        }
        func subscription(renewals: Int, endingInDays days: Double, product: String = "pro.monthly", extra: [String: Any] = [:]) -> [String: Any] {
            let end = nowMs + Int64(days * 86_400_000)
            var spec: [String: Any] = [
                "product_id": product, "original_transaction_id": original, "renewals": renewals,
                "start_ms": end - Int64(renewals) * Self.monthMs, "period_ms": Self.monthMs,
            ]
            spec.merge(extra) { $1 }
            return spec
        }
        func renewalId(_ renewals: Int) -> String { renewals == 1 ? original : original + String(format: "%03d", renewals - 1) }

        if profile == .bench {
            let renewals = Int.random(in: 1...24, using: &generator)
            // Never within two hours of now, where the expiry lag would hold a revoke back.
            var days = Double.random(in: -20...25, using: &generator)
            if abs(days) < 0.1 { days = days < 0 ? -0.1 : 0.1 }
            // Apple as it is: one receipt in twenty from the sandbox (the 21007 hop), one in fifty
            // answered first with a transient fault (retried in the run).
            let current = subscription(renewals: renewals, endingInDays: days)
            var spec: [String: Any] = ["generate": ["subscriptions": [current]]]
            let draw = Int.random(in: 0..<100, using: &generator)
            if draw < 5 { spec["environment"] = "Sandbox" }
            if draw >= 98 { spec["faults"] = [draw == 98 ? ["status": 21199, "is_retryable": true] : ["http": 503]] }
            // Night 2 is a real second night: since night 1 one account in ten renewed (and Apple
            // answers with the fresher receipt that says so), one in fifty was refunded, and three
            // in a hundred of those active expired (the simulator answers so after `POST /__night/2`;
            // both nights run at the same hour, so an expiry shows as an earlier end).
            let end = nowMs + Int64(days * 86_400_000)
            let night1 = Expected(product: "pro.monthly", state: end > nowMs ? "active" : "expired", expiresMs: end)
            var night2 = night1
            let change = Int.random(in: 0..<100, using: &generator)
            if change < 10 {
                let renewed: [String: Any] = ["generate": ["subscriptions": [subscription(renewals: renewals + 1, endingInDays: days + 30)]]]
                spec["night2"] = renewed.merging(["latest_receipt": try blob(renewed)]) { $1 }
                let renewedEnd = nowMs + Int64((days + 30) * 86_400_000)  // as `subscription` computes it
                night2 = Expected(product: "pro.monthly", state: renewedEnd > nowMs ? "active" : "expired", expiresMs: renewedEnd)
            } else if change < 12 {
                var refunded = current
                refunded["cancel"] = ["at_ms": nowMs - 3_600_000, "reason": 0]
                spec["night2"] = ["generate": ["subscriptions": [refunded]]]
                night2 = Expected(product: "pro.monthly", state: "refunded", expiresMs: end)
            } else if change < 15 && end > nowMs {
                let lapsed = subscription(renewals: renewals, endingInDays: -0.5, extra: ["auto_renew": false, "expiration_intent": 1])
                spec["night2"] = ["generate": ["subscriptions": [lapsed]]]
                night2 = Expected(product: "pro.monthly", state: "expired", expiresMs: nowMs - 43_200_000)
            }
            account.expected = [[night1], [night2]]
            // One answer in twenty carries a fresher `latest_receipt` than the one stored (the run
            // stores it in place of the old); one account in twenty has a second receipt, from
            // another device, with a lifetime purchase.
            let extra = Int.random(in: 0..<100, using: &generator)
            if extra < 5 {
                spec["latest_receipt"] = try blob(spec.filter { $0.key != "faults" })
            }
            try receipt(spec)
            if extra >= 5 && extra < 10 {
                try receipt(["generate": ["purchases": [["product_id": "lifetime", "transaction_id": original + "7", "purchase_ms": nowMs - 200 * 86_400_000]]]])
                let lifetime = Expected(product: "lifetime", state: "active", expiresMs: nil)
                account.expected = account.expected.map { $0 + [lifetime] }
            }
            // Half the accounts are stored as the answer says, half one period behind.
            if index % 2 == 0 {
                stored("pro.monthly", end > nowMs ? "active" : "expired", expiresMs: end, latest: renewalId(renewals))
            } else {
                stored("pro.monthly", "active", expiresMs: end - Self.monthMs)
            }
            return account
        }

        let kind = Self.schedule[index % Self.schedule.count]
        let renewals = Int.random(in: 1...12, using: &generator)
        switch kind {
        case .renewedStoredStale:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals + 1, endingInDays: 20)]]])
            stored("pro.monthly", "active", expiresMs: nowMs + 20 * 86_400_000 - Self.monthMs)
        case .unchanged, .unchangedYearly:
            let product = kind == .unchanged ? "pro.monthly" : "pro.yearly"
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: 12, product: product)]]])
            stored(product, "active", expiresMs: nowMs + 12 * 86_400_000, latest: renewalId(renewals))
        case .newPurchase:
            try receipt(["generate": ["subscriptions": [subscription(renewals: 1, endingInDays: 29)]]])
        case .expiredStoredActive:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: -3, extra: ["auto_renew": false, "expiration_intent": 1])]]])
            stored("pro.monthly", "active", expiresMs: nowMs - 3 * 86_400_000 + Self.monthMs)
        case .refunded:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: 15, extra: [
                "cancel": ["at_ms": nowMs - 2 * 86_400_000, "reason": 1], "auto_renew": false,
            ])]]])
            stored("pro.monthly", "active", expiresMs: nowMs + 15 * 86_400_000, latest: renewalId(renewals))
        case .upgraded:
            let monthly = subscription(renewals: renewals, endingInDays: 10, extra: [
                "cancel": ["at_ms": nowMs - 86_400_000, "reason": 0, "upgraded": true], "auto_renew_product_id": "pro.yearly",
            ])
            var yearly = subscription(renewals: 1, endingInDays: 364, product: "pro.yearly")
            yearly["original_transaction_id"] = original + "9"
            yearly["period_ms"] = 365 * 86_400_000
            yearly["start_ms"] = nowMs - 86_400_000
            try receipt(["generate": ["subscriptions": [monthly, yearly]]])
            stored("pro.monthly", "active", expiresMs: nowMs + 10 * 86_400_000, latest: renewalId(renewals))
        case .gracePeriod:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: -1, extra: [
                "grace_until_ms": nowMs + 5 * 86_400_000, "billing_retry": true, "expiration_intent": 2,
            ])]]])
            stored("pro.monthly", "active", expiresMs: nowMs - 86_400_000, latest: renewalId(renewals))
        case .billingRetry:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: -10, extra: [
                "billing_retry": true, "expiration_intent": 2,
            ])]]])
            stored("pro.monthly", "billing_retry", expiresMs: nowMs - 40 * 86_400_000)
        case .familyShared:
            // The customer's own chain beside a family copy of the same product, a later expiry,
            // revoked yesterday (the organizer stopped sharing): the own chain decides.
            try receipt(["generate": ["subscriptions": [
                subscription(renewals: renewals, endingInDays: 8),
                subscription(renewals: 1, endingInDays: 20, extra: [
                    "original_transaction_id": original + "9", "ownership": "FAMILY_SHARED",
                    "cancel": ["at_ms": nowMs - 86_400_000, "reason": 0]]),
            ]]])
        case .lifetime:
            try receipt(["generate": ["purchases": [["product_id": "lifetime", "transaction_id": original, "purchase_ms": nowMs - 400 * 86_400_000]]]])
            stored("lifetime", "active", expiresMs: nil)
        case .consumables:
            try receipt(["generate": ["purchases": [
                ["product_id": "coins.100", "transaction_id": original, "purchase_ms": nowMs - 5 * 86_400_000],
                ["product_id": "coins.100", "transaction_id": original + "1", "purchase_ms": nowMs - 86_400_000, "quantity": 3],
            ]]])
        case .seasonPass:
            try receipt(["generate": ["purchases": [["product_id": "season.pass", "transaction_id": original, "purchase_ms": nowMs - 10 * 86_400_000]]]])
        case .sandbox:
            try receipt(["environment": "Sandbox", "generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: 2)]]])
        case .appleBusy:
            try receipt(["faults": [["status": 21199, "is_retryable": true]], "repeat_faults": true,
                     "generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: 20)]]])
            stored("pro.monthly", "active", expiresMs: nowMs + 20 * 86_400_000 - Self.monthMs)
        case .appleFailure:
            try receipt(["faults": [["status": 21010, "is_retryable": false]], "repeat_faults": true])
            stored("pro.monthly", "active", expiresMs: nowMs + 5 * 86_400_000)
        case .malformedBlob:
            account.receipts.append(SeedStore.Receipt(accountId: accountId, bundleId: "com.example.app", latestReceipt: "not a receipt!"))
            stored("lifetime", "active", expiresMs: nil)
        case .twoReceipts:
            try receipt(["generate": ["purchases": [["product_id": "lifetime", "transaction_id": original, "purchase_ms": nowMs - 90 * 86_400_000]]]])
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: 6)]]])
        case .renewedAgain:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals + 1, endingInDays: 27)]]])
            stored("pro.monthly", "expired", expiresMs: nowMs - 3 * 86_400_000)
        case .autoRenewOff:
            try receipt(["generate": ["subscriptions": [subscription(renewals: renewals, endingInDays: 9, extra: ["auto_renew": false])]]])
            stored("pro.monthly", "active", expiresMs: nowMs + 9 * 86_400_000, latest: renewalId(renewals))
        }
        return account
    }
}
