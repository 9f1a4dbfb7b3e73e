import AppStore
import AppStoreModels
import AppleSimulator
import Foundation
import Hashing
import HTTP
import Jobs
import Postgres
import Reconciliation
import SignedData
import Storage
import Testing
import TestSupport
import Throttling
@testable import WorldSupport

/// Answers to CONSUMPTION_REQUEST as a property (docs/consumption.md, "Consent is the app's to
/// declare" and "The body"): random holders, ledgers, declarations, consent histories, request
/// times and Apple failures, passes of the real `ConsumptionAnswering` against real PostgreSQL
/// and the simulator. Consent changes between passes, so what held during a pass is what held
/// when its answers left. Whatever happens, Apple never takes a body unless every holder of its
/// transaction consented then, and never an `UNDELIVERED_*` the app did not declare.
@Suite struct ConsumptionConsentPropertyTests {
    static let accounts = ["ann", "ben", "cat"]
    static let statuses = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_OTHER"]

    /// One purchase asked about: its original and transaction ids, its holders (the first holds
    /// the ledger row of its original, the others name it through a stored receipt), whether its
    /// own transaction is in the ledger (a renewal bought since the last run is not), and the app's
    /// delivery declaration.
    struct Purchase {
        var original: String
        var transaction: String
        var holders: [String]
        var inLedger: Bool
        var declared: String?
        var failures: Int
    }

    static func request(_ purchase: Purchase, uuid: String, minutesAgo: Int) throws -> String {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let transaction: [String: Any] = [
            "transactionId": purchase.transaction, "originalTransactionId": purchase.original, "productId": "coins.100", "type": "Consumable",
            "quantity": 1, "purchaseDate": now - 3 * 86_400_000, "inAppOwnershipType": "PURCHASED",
        ]
        let spec: [String: Any] = [
            "notificationType": "CONSUMPTION_REQUEST", "notificationUUID": uuid, "signedDate": now - Int64(minutesAgo) * 60_000,
            "data": ["bundleId": "com.example.app", "environment": "Production", "appAppleId": V2Notifications.appAppleId,
                     "consumptionRequestReason": "UNINTENDED_PURCHASE", "transactionInfo": transaction],
        ]
        return try SignedNotifications(chain: V2Notifications.chain).body(forSpec: Array(JSONSerialization.data(withJSONObject: spec)))
    }

    static func received(_ world: RunWorld) async throws -> [(transaction: String, body: String, status: Int)] {
        try await V2Notifications.consumptionReceived(world)
    }

    @Test func noBodyLeavesWithoutEveryHoldersConsentNorAnUndeclaredUndelivered() async throws {
        let seed = FuzzSeed("noBodyLeavesWithoutEveryHoldersConsentNorAnUndeclaredUndelivered")
        var generator = seed.generator
        func pick(_ n: Int) -> Int { Int(generator.next() % UInt64(n)) }
        var accepted = 0
        var withheld = 0
        var withdrawnWhileWaiting = 0
        for world in 0..<4 {
            var purchases: [Purchase] = []
            for index in 0..<6 {
                let original = "o\(world)-\(index)"
                let renewal = pick(3) == 0
                // The first purchase of each world is held and fails a whole pass: its answer waits.
                let holders = Array(Self.accounts.shuffled(using: &generator).prefix(index == 0 ? 1 + pick(3) : pick(4)))
                purchases.append(Purchase(
                    original: original, transaction: renewal ? original + "-r" : original, holders: holders,
                    inLedger: !renewal && pick(4) != 0, declared: pick(3) == 0 ? Self.statuses[pick(3)] : nil,
                    failures: index == 0 || pick(2) == 0 ? 5 + pick(4) : pick(2)))
            }
            var faults: [String: Any] = [:]
            for purchase in purchases where purchase.failures > 0 {
                faults[purchase.transaction] = Array(repeating: ["http": 500, "error_code": 5000000] as [String: Any], count: purchase.failures)
            }
            try await RunWorld.with("consumption-property-\(world)", scenario: ["api": ["consumption": ["faults": faults]]]) { world in
                let connection = world.connection
                for purchase in purchases {
                    guard let first = purchase.holders.first else { continue }
                    try await connection.execute("""
                        INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity, environment)
                        SELECT id, \(first), \(purchase.original), 'coins.100', now() - interval '3 days', 1, 'Production'
                        FROM unnest(\([purchase.original] + (purchase.inLedger && purchase.transaction != purchase.original ? [purchase.transaction] : []))::text[]) AS id
                        """)
                    for other in purchase.holders.dropFirst() {
                        try await connection.execute("""
                            INSERT INTO iap.app_receipts (account_id, bundle_id, latest_receipt, receipt_original_transaction_ids)
                            VALUES (\(other), 'com.example.app', 'blob', ARRAY[\(purchase.original)]::text[])
                            """)
                    }
                    if let declared = purchase.declared {
                        try await connection.execute("""
                            INSERT INTO iap.consumption_usage (transaction_id, delivery_status) VALUES (\(purchase.transaction), \(declared))
                            """)
                    }
                }
                var requests: [String] = []
                for (index, purchase) in purchases.enumerated() {
                    for copy in 0..<(1 + pick(2)) {
                        requests.append(try Self.request(purchase, uuid: "\(purchase.transaction)-\(copy)", minutesAgo: 30 + pick(600) + index))
                    }
                }
                _ = try await V2Notifications.ingest(world, requests)
                let (answering, gateway) = try Self.answering(world)
                defer { gateway.shutdown() }
                var seen = 0
                var waiting: [String] = []  // transactions whose answer Apple has not taken yet
                for pass in 0..<3 {
                    // Consent as it stands for this pass: no row, true or false, a preference or none.
                    // Given by all at first, so that answers wait (Apple's 500s); then a holder of a
                    // waiting answer withdraws as often as not.
                    var consented: [String: Bool] = [:]
                    for account in Self.accounts {
                        consented[account] = pass == 0 ? true : [nil, true, false][pick(3)]
                    }
                    for id in waiting where pick(2) == 0 {
                        if let holder = purchases.first(where: { $0.transaction == id })?.holders.randomElement(using: &generator) {
                            consented[holder] = pick(2) == 0 ? false : nil
                        }
                    }
                    try await connection.execute("DELETE FROM iap.consumption_consent")
                    for account in Self.accounts {
                        guard let answer = consented[account] else { continue }
                        try await connection.execute("""
                            INSERT INTO iap.consumption_consent (account_id, consented, refund_preference)
                            VALUES (\(account), \(answer), \(pick(2) == 0 ? "DECLINE" : nil))
                            """)
                    }
                    withdrawnWhileWaiting += waiting.filter { id in
                        purchases.first { $0.transaction == id }?.holders.contains { consented[$0] != true } == true
                    }.count
                    _ = try await answering.run(now: Date(), dryRun: false) { _ in }
                    let received = try await Self.received(world)
                    for entry in received.dropFirst(seen) {
                        let purchase = try #require(purchases.first { $0.transaction == entry.transaction })
                        let body = try #require(try JSONSerialization.jsonObject(with: Data(entry.body.utf8)) as? [String: Any])
                        #expect(!purchase.holders.isEmpty, "\(seed): an answer for \(entry.transaction), which no account holds")
                        #expect(purchase.holders.allSatisfy { consented[$0] == true },
                                "\(seed): \(entry.transaction) answered while its holders \(purchase.holders) had consent \(consented)")
                        let delivery = body["deliveryStatus"] as? String ?? ""
                        #expect(delivery == (purchase.declared ?? "DELIVERED"),
                                "\(seed): \(entry.transaction) sent \(delivery), the app declared \(purchase.declared ?? "nothing")")
                        if entry.status == 202 { accepted += 1 }
                    }
                    seen = received.count
                    waiting = try await connection.query("SELECT transaction_id FROM iap.consumption_answers WHERE outcome = 'pending'")
                        .map { try $0.decode("transaction_id") }
                }
                withheld += try await world.count("SELECT count(*) FROM iap.consumption_answers WHERE outcome = 'no_consent'")
            }
        }
        // The property held over worlds where answers were taken, others withheld, and some waited
        // for Apple while a holder's consent was withdrawn: not vacuously.
        #expect(accepted > 0 && withheld > 0 && withdrawnWhileWaiting > 0,
                "\(seed): \(accepted) accepted, \(withheld) withheld, \(withdrawnWhileWaiting) withdrawn while waiting")
    }

    /// The command's own parts, against the world's simulator and Apple's test key.
    static func answering(_ world: RunWorld) throws -> (ConsumptionAnswering, AppleGateway) {
        let verifier = try SignedDataVerifier(configuration: .init(
            trustedRoots: [V2Notifications.chain.root], bundleIds: ["com.example.app"], appAppleId: V2Notifications.appAppleId))
        let pem = String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/certs/testSigningKey.p8"), as: UTF8.self)
        let credentials = try ServerAPICredentials(issuerId: "issuer", keyId: "KEY", bundleId: "com.example.app", privateKeyPEM: pem)
        let gateway = AppleGateway(concurrency: 2)
        let client = ServerAPIClient(
            endpoints: .init(production: world.simulator.apiURL, sandbox: world.simulator.sandboxAPIURL), token: ServerAPIToken(credentials: credentials),
            gateway: gateway, policy: VerificationPolicy(), logger: .quiet)
        var answering = ConsumptionAnswering(
            store: ConsumptionStore(connection: world.connection), notifications: NotificationStore(connection: world.connection), verifier: verifier,
            client: client, policy: ConsumptionPolicy(), lookBack: 3 * 86_400, logger: .quiet)
        answering.backoff = Backoff(base: .milliseconds(2), maximum: .milliseconds(20))  // the retries' order, not their pace, is tested
        return (answering, gateway)
    }
}
