import AppStoreModels
import Foundation
import Hashing
import Logging
import Postgres
import Reconciliation
import SchemaMigrations
import Storage
import Testing
import TestSupport

/// The journal right on every path (docs/reports.md, "Right on every path"), as a property: random
/// worlds of sales (currencies, offers, trials, family copies, full and prorated refunds,
/// reversals, restored copies sharing a web order line item, quantities) told to the job through
/// random sources in random orders (verifyReceipt's live answer, a v1 notification, a V2
/// notification or history's copy of it, stale ones included, the App Store Server API), each
/// through the real decoders and the real ledger upsert, twice. Each sale's net per currency must
/// end equal to the money that moved, worked out here from the world alone.
@Suite(.serialized) struct JournalPathTests {

    struct Sale {
        enum Kind: CaseIterable { case subscription, nonConsumable, consumable }
        var kind: Kind
        var account: String
        var product: String
        /// The transaction ids that are this one purchase: the first, then restored copies.
        var copies: [String]
        var original: String
        var line: String?
        var family = false
        var trial = false
        /// What the customer paid (an offer's price, 0 for a trial) and its currency.
        var paid: Int64
        var currency: String
        var offer: String?
        var purchase: Int64
        var refund: (at: Int64, prorated: Int?)?
        var reversal: Int64?

        func cancelled(at time: Int64) -> Bool {
            guard let refund, refund.at <= time else { return false }
            return reversal.map { $0 > time } ?? true
        }
    }

    /// One world: its sales, built from the seed.
    static func world(_ generator: inout SplitMix64, index: Int) -> [Sale] {
        func pick(_ n: Int) -> Int { Int(generator.next() % UInt64(n)) }
        var sales: [Sale] = []
        // Each feature in a known share of the worlds, whatever the seed: the kind by turns, a
        // restored copy in every other world that can have one, a family copy in every fifth.
        let kind = Sale.Kind.allCases[index % 3]
        let periods = kind == .subscription ? 1 + pick(2) : 1
        let currency = ["USD", "EUR", "JPY"][pick(3)]
        let start = 1_780_000_000_000 + Int64(index) * 10_000_000
        for period in 0..<periods {
            let id = "w\(index)p\(period)"
            // The worlds only unsigned sources tell have products of their own, whose catalog price changes.
            let product = ["sub", "life", "coins"][Sale.Kind.allCases.firstIndex(of: kind)!] + (index % 4 == 3 ? "-\(index)" : "")
            var sale = Sale(kind: kind, account: "a\(index)", product: product,
                            copies: [id], original: kind == .subscription ? "w\(index)p0" : id, line: kind == .subscription ? "\(index)\(period)" : nil,
                            paid: Int64(1 + pick(90_000)), currency: currency, purchase: start + Int64(period) * 1_000_000)
            // Restored on another device: the same purchase, never revoked itself (Apple revokes the purchase's transaction).
            if kind != .consumable && (index / 3) % 2 == 0 { sale.copies.append(id + "r") }
            if kind == .subscription && period == 0 {
                switch pick(4) {
                case 0: (sale.trial, sale.paid, sale.offer) = (true, 0, "FREE_TRIAL")
                case 1: sale.offer = "PAY_UP_FRONT"
                default: break
                }
            }
            if pick(2) == 0 {
                sale.refund = (sale.purchase + 100_000, pick(2) == 0 ? nil : pick(100_001))
                if pick(2) == 0 { sale.reversal = sale.purchase + 200_000 }
            }
            sales.append(sale)
        }
        if index % 5 == 0 {  // a family member's copy: its own transaction, no money, its revoke none either
            var copy = sales[0]
            (copy.account, copy.copies, copy.family, copy.line) = ("f\(index)", ["w\(index)f"], true, copy.line.map { $0 + "f" })
            copy.original = "w\(index)f"
            sales.append(copy)
        }
        return sales
    }

    /// What moved, per currency, as the latest word the job was told says (at `latest`): Apple's
    /// signed price when any signed source told it, else the catalog's when the sale was first
    /// recorded (USD); a prorated refund's
    /// percentage when a signed word that was not stale showed it, else the whole price.
    static func expected(_ sale: Sale, latest: Int64, signed: Bool, prorationKnown: Bool, catalogPrice: Int64) -> [String: Int64] {
        guard !sale.family else { return [:] }
        let (price, currency) = signed ? (sale.paid, sale.currency) : (sale.trial ? 0 : catalogPrice, "USD")
        var net = price
        if sale.cancelled(at: latest) {
            if prorationKnown, let percentage = sale.refund?.prorated {
                let exact = Int128(price) * Int128(percentage)
                net -= Int64((exact + 50_000) / 100_000)  // half away from zero; prices are positive
            } else {
                net -= price
            }
        }
        return net == 0 ? [:] : [currency: net]
    }

    /// A copy of a sale's transaction as Apple's signed data says it at `time`.
    static func signed(_ sale: Sale, copy: String, at time: Int64) throws -> JWSTransaction {
        var fields: [String: Any] = [
            "transactionId": copy, "originalTransactionId": sale.original,
            "productId": sale.product, "bundleId": "com.example", "purchaseDate": sale.purchase, "quantity": 1 + Int(sale.purchase % 3),
            "type": ["Auto-Renewable Subscription", "Non-Consumable", "Consumable"][Sale.Kind.allCases.firstIndex(of: sale.kind)!],
            "inAppOwnershipType": sale.family ? "FAMILY_SHARED" : "PURCHASED", "price": sale.paid, "currency": sale.currency,
            "environment": "Production", "signedDate": time,
        ]
        if sale.kind == .subscription {
            fields["expiresDate"] = sale.purchase + 1_000_000
            fields["webOrderLineItemId"] = sale.line
        }
        if let offer = sale.offer { (fields["offerDiscountType"], fields["offerType"]) = (offer, 1) }
        if sale.cancelled(at: time) && copy == sale.copies[0] {
            fields["revocationDate"] = sale.refund!.at
            fields["revocationReason"] = 0
            if sale.family {
                fields["revocationType"] = "FAMILY_REVOKE"
            } else if let percentage = sale.refund!.prorated {
                (fields["revocationType"], fields["revocationPercentage"]) = ("REFUND_PRORATED", percentage)
            } else {
                fields["revocationType"] = "REFUND_FULL"
            }
        }
        return try JWSTransaction(json: Array(JSONSerialization.data(withJSONObject: fields)))
    }

    /// verifyReceipt's `latest_receipt_info` entries for a sale at `time`, as a unified receipt (live or a v1 body's).
    static func unified(_ sale: Sale, at time: Int64) -> [String: Any] {
        let entries: [[String: Any]] = sale.copies.map { copy in
            var entry: [String: Any] = [
                "transaction_id": copy, "original_transaction_id": sale.original, "product_id": sale.product,
                "purchase_date_ms": "\(sale.purchase)", "original_purchase_date_ms": "\(sale.purchase)", "quantity": "1",
                "is_trial_period": sale.trial ? "true" : "false", "in_app_ownership_type": sale.family ? "FAMILY_SHARED" : "PURCHASED",
            ]
            if sale.kind == .subscription {
                entry["expires_date_ms"] = "\(sale.purchase + 1_000_000)"
                entry["web_order_line_item_id"] = sale.line
            }
            if sale.cancelled(at: time) && copy == sale.copies[0] {
                (entry["cancellation_date_ms"], entry["cancellation_reason"]) = ("\(sale.refund!.at)", "0")
            }
            return entry
        }
        return ["status": 0, "environment": "Production", "latest_receipt_info": entries]
    }

    enum Source: CaseIterable { case verifyReceipt, serverAPI, notificationV1, notificationV2 }

    /// The ledger entries one source gives for a sale, read at `time` (a notification tells of `event`).
    static func entries(_ sale: Sale, source: Source, time: Int64, event: Int64, copy: String) throws -> [LedgerEntry] {
        func date(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }
        switch source {
        case .verifyReceipt:
            let answer = try VerifyReceiptResponse.decode(Array(JSONSerialization.data(withJSONObject: unified(sale, at: time))))
            return answer.latestReceiptInfo.map {
                LedgerEntry(accountId: sale.account, transaction: $0, environment: .production, source: .verifyReceipt, asOf: date(time))
            }
        case .notificationV1:
            let body: [String: Any] = ["notification_type": "REFUND", "password": "secret", "environment": "PROD",
                                       "unified_receipt": unified(sale, at: event)]
            let notification = try ServerNotification.decode(Array(JSONSerialization.data(withJSONObject: body)))
            return notification.unifiedReceipt.latestReceiptInfo.map {
                LedgerEntry(accountId: sale.account, transaction: $0, environment: .production, source: .notificationV1)
            }
        case .serverAPI:
            return try sale.copies.map {
                let transaction = try signed(sale, copy: $0, at: time)
                return LedgerEntry(accountId: sale.account, transaction: transaction.ledgerTransaction, environment: .production,
                                   source: .serverAPI, signed: transaction.signedTerms, asOf: transaction.signedDate)
            }
        case .notificationV2:
            // Signed when the event happened, whenever it is read (history's copy, a retry).
            let transaction = try signed(sale, copy: copy, at: event)
            return [LedgerEntry(accountId: sale.account, transaction: transaction.ledgerTransaction, environment: .production,
                                source: .notificationV2, signed: transaction.signedTerms, asOf: date(event))]
        }
    }

    @Test func eachSalesNetIsTheMoneyThatMovedWhateverTheSourceAndOrder() async throws {
        let seed = FuzzSeed("eachSalesNetIsTheMoneyThatMovedWhateverTheSourceAndOrder")
        var generator = seed.generator
        func pick(_ n: Int) -> Int { Int(generator.next() % UInt64(n)) }
        let database = try await TestDatabase.create("journal-paths")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.execute("""
            INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES
                ('sub', 'auto_renewable', 'P1M', 4.99, 'USD'), ('life', 'non_consumable', NULL, 4.99, 'USD'),
                ('coins', 'consumable', NULL, 4.99, 'USD')
            """)
        var expected: [String: [String: Int64]] = [:]
        var saleOf: [String: String] = [:]
        var told: [String: String] = [:]  // what each sale was told, for a failure's message
        for index in 0..<40 {
            let sales = Self.world(&generator, index: index)
            let unsignedOnly = index % 4 == 3
            let sources: [Source] = unsignedOnly ? [.verifyReceipt, .notificationV1] : Source.allCases
            if unsignedOnly {
                let type = ["auto_renewable", "non_consumable", "consumable"][Sale.Kind.allCases.firstIndex(of: sales[0].kind)!]
                try await connection.execute("""
                    INSERT INTO iap.products (product_id, type, price, currency) VALUES (\(sales[0].product), \(type), 4.99, 'USD')
                    """)
            }
            var (catalogPrice, recordedPrice): (Int64, Int64) = (4_990, 4_990)
            for sale in sales {
                let events = [sale.purchase] + [sale.refund?.at, sale.reversal].compactMap { $0 }
                let end = events.max()! + 50_000
                // Reads at random times across the sale's life, in time order; notifications of
                // events before the read, in any order (a retry, history read late). Half the
                // worlds end with a live answer after everything; the others with whatever came.
                var reads = (0..<(2 + pick(6))).map { _ in sale.purchase + Int64(pick(Int(end - sale.purchase))) }.sorted()
                let closes = pick(2) == 0
                if closes { reads.append(end + 1_000) }
                // The word the job was told last, as the ledger keeps it (docs/database.md, "The ledger").
                var (dated, latest, signedSeen, prorationKnown) = (Int64.min, Int64.min, false, false)
                var lastLive: Int64?
                for (number, time) in reads.enumerated() {
                    let source = closes && number == reads.count - 1 ? (unsignedOnly ? .verifyReceipt : .serverAPI) : sources[pick(sources.count)]
                    // v1 has no reversal to tell.
                    let past = events.filter { $0 <= time && (source != .notificationV1 || $0 != sale.reversal) }
                    let event = past[pick(past.count)]
                    let entries = try Self.entries(sale, source: source, time: time, event: event, copy: sale.copies[0])
                    let isNotification = source == .notificationV1 || source == .notificationV2
                    for _ in 0..<2 {
                        try await connection.withTransaction { [lastLive] connection in
                            let store = ReconciliationStore(connection: connection)
                            // As a notification's processing does: the account's last live verification first.
                            if isNotification, let lastLive {
                                try await store.noteLatestWord(transactionIds: entries.map(\.transaction.transactionId),
                                                               asOf: Date(timeIntervalSince1970: Double(lastLive) / 1000))
                            }
                            try await store.upsertLedger(entries)
                        }
                    }
                    if !isNotification { lastLive = time }
                    // The operator raises the price once the world's first sale is recorded: no sale
                    // made before changes, a later one is sold at the new price.
                    if unsignedOnly && number == 0 && catalogPrice == 4_990 {
                        try await connection.execute("UPDATE iap.products SET price = 5.99 WHERE product_id = \(sale.product)")
                        (recordedPrice, catalogPrice) = (4_990, 5_990)
                    } else if number == 0 {
                        recordedPrice = catalogPrice
                    }
                    told["\(sale.account)/\(sale.copies[0])", default: "\(sale)"] += "; \(source)@\(time) of \(event)"
                    let word = source == .notificationV2 || source == .notificationV1 ? event : time
                    if source != .notificationV1 {
                        if [.serverAPI, .notificationV2].contains(source) {
                            signedSeen = true
                            // A word not stale decides; a stale one still tells how the money of
                            // the cancellation the row shows went.
                            if sale.cancelled(at: word) && (word >= dated || sale.cancelled(at: latest)) { prorationKnown = true }
                        }
                        dated = max(dated, word)
                    }
                    // A word telling of a cancellation is at least as late as it (a v1 REFUND's too).
                    if source != .notificationV1 || sale.refund?.at == event {
                        latest = max(latest, word)
                        dated = max(dated, word)
                    }
                }
                let key = "\(sale.account)/\(sale.copies[0])"
                for copy in sale.copies { saleOf[copy] = key }
                expected[key] = Self.expected(sale, latest: latest, signed: signedSeen, prorationKnown: prorationKnown,
                                              catalogPrice: recordedPrice)
            }
        }
        var actual: [String: [String: Int64]] = [:]
        for row in try await connection.query("""
            SELECT transaction_id, COALESCE(currency, '') AS currency, sum(amount_milliunits)::bigint AS net
            FROM iap.finance_journal GROUP BY transaction_id, currency
            """) {
            let key = try #require(saleOf[try row.decode("transaction_id", as: String.self)])
            actual[key, default: [:]][try row.decode("currency", as: String.self), default: 0] += try row.decode("net", as: Int64?.self) ?? 0
        }
        for key in Set(expected.keys).union(actual.keys).sorted() {
            #expect((actual[key] ?? [:]).filter { $0.value != 0 } == expected[key] ?? [:], "sale \(key): \(told[key] ?? ""); \(seed)")
        }
        #expect(try await connection.query("SELECT 1 FROM iap.finance_journal WHERE event = 'adjustment'").count > 0, "no world adjusted")
        await connection.close()
        try await database.drop()
    }

    /// Found by the property above (seed 687820082241270864): a consumable's refund told first by
    /// a v1 REFUND (undated; its row new), then its purchase's V2 notification, signed before the
    /// refund, read late. The v1 word is at least as late as the refund it tells of, on the new
    /// row as on an existing one; the older signed word keeps the refund (it prices the sale in
    /// JPY), and no reversal is made of it.
    @Test func aV1RefundFirstThenAnOlderSignedWordKeepsTheRefund() async throws {
        let database = try await TestDatabase.create("journal-v1-first")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.execute("INSERT INTO iap.products (product_id, type, price, currency) VALUES ('coins', 'consumable', 4.99, 'USD')")
        let purchase: Int64 = 1_780_170_000_000
        let sale = Sale(kind: .consumable, account: "a17", product: "coins", copies: ["w17p0"], original: "w17p0", line: nil,
                        paid: 47_750, currency: "JPY", offer: nil, purchase: purchase, refund: (at: purchase + 100_000, prorated: 29_440),
                        reversal: purchase + 200_000)
        for (source, time, event) in [(Source.notificationV1, purchase + 182_831, purchase + 100_000),
                                      (.notificationV1, purchase + 191_421, purchase), (.notificationV2, purchase + 240_304, purchase)] {
            let entries = try Self.entries(sale, source: source, time: time, event: event, copy: "w17p0")
            try await connection.withTransaction { try await ReconciliationStore(connection: $0).upsertLedger(entries) }
        }
        let events = try await connection.query("SELECT event, amount_milliunits, currency FROM iap.finance_journal ORDER BY id").map {
            "\(try $0.decode("event", as: String.self)) \(try $0.decode("amount_milliunits", as: Int64.self)) \(try $0.decode("currency", as: String.self))"
        }
        // The purchase at the catalog's price first (nothing signed yet) with its refund, then the
        // signed price's adjustments: the net is nothing, in JPY and in USD.
        #expect(!events.contains { $0.hasPrefix("refund_reversal") }, "\(events)")
        let net = try await connection.query("""
            SELECT currency, sum(amount_milliunits)::bigint AS net FROM iap.finance_journal GROUP BY currency HAVING sum(amount_milliunits) <> 0
            """)
        #expect(net.isEmpty, "\(events)")
        await connection.close()
        try await database.drop()
    }
}
