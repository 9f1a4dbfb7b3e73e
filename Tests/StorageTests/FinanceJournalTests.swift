import AppStoreModels
import CivilCalendar
import Foundation
import Hashing
import Logging
import SchemaMigrations
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport

/// The finance journal (docs/reports.md, "The finance journal") against real PostgreSQL: Apple's
/// real-shaped signed transactions go through the real decoder and the job's own ledger upsert,
/// and the journal is read back. Every expected amount is worked out by hand in the table. One
/// case at a time: each makes a database of its own.
@Suite(.serialized) struct FinanceJournalTests {
    /// Apple's own model of a signed transaction with a revocation (app-store-server-library-swift).
    static func fixture() throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(try Fixtures.bytes("asapi/apple-lib/swift/models/signedTransactionWithRevocation.json")))
            as! [String: Any]
    }

    /// The fixture with `changes` applied (`NSNull` removes a field), decoded as a run decodes it.
    static func transaction(_ changes: [String: Any]) throws -> JWSTransaction {
        var fields = try fixture()
        for (key, value) in changes { fields[key] = value is NSNull ? nil : value }
        return try JWSTransaction(json: Array(JSONSerialization.data(withJSONObject: fields)))
    }

    /// Apple's signed word, as of its signedDate unless `asOf` says otherwise.
    static func write(_ transactions: [JWSTransaction], account: String = "payer", asOf: Date? = nil, _ connection: PostgresConnection) async throws {
        try await connection.withTransaction { connection in
            try await ReconciliationStore(connection: connection).upsertLedger(transactions.map {
                LedgerEntry(accountId: account, transaction: $0.ledgerTransaction, environment: .sandbox, source: .serverAPI, signed: $0.signedTerms,
                            asOf: asOf ?? $0.signedDate)
            })
        }
    }

    /// Apple's REFUND_REVERSED: the transaction signed again at `at`, without its revocation.
    static func reverse(_ transaction: JWSTransaction, account: String = "payer", at: Date, _ connection: PostgresConnection) async throws {
        var reinstated = transaction
        (reinstated.revocationDate, reinstated.revocationReason, reinstated.rawRevocationType, reinstated.revocationPercentage) = (nil, nil, nil, nil)
        try await write([reinstated], account: account, asOf: at, connection)
    }

    /// `event amount amount_source`, in order, for one transaction.
    static func journal(_ connection: PostgresConnection, transaction: String? = nil) async throws -> [String] {
        try await connection.query("""
            SELECT event, amount_milliunits, amount_source FROM iap.finance_journal
            WHERE \(transaction == nil) OR transaction_id = \(transaction) ORDER BY id
            """).map { row in
            "\(try row.decode("event", as: String.self)) \(try row.decode("amount_milliunits", as: Int64?.self).map(String.init) ?? "-") \(try row.decode("amount_source", as: String.self))"
        }
    }

    /// One case: the fixture changed so, and the events it must make (worked out by hand).
    struct Case: Sendable, CustomStringConvertible {
        let name: String
        let changes: @Sendable () -> [String: Any]
        let events: [String]
        var description: String { name }
    }

    static let cases: [Case] = [
        // The fixture as Apple's library has it: a renewal (23456 of chain 12345) revoked by an upgrade: no money back.
        Case(name: "an upgrade's revocation", changes: { [:] }, events: ["renewal 10990 signed"]),
        // 50000 is 50 %: 10990 x 0.5 = 5495 exactly.
        Case(name: "prorated 50 %", changes: { ["isUpgraded": false] }, events: ["renewal 10990 signed", "refund -5495 signed"]),
        // The report's row: 59.99 yearly, 72.5 % back: 59990 x 0.725 = 43492.75, half away from zero: 43493.
        Case(name: "prorated 72.5 % of 59.99",
             changes: { ["isUpgraded": false, "price": 59990, "revocationPercentage": 72500, "offerType": NSNull(), "offerDiscountType": NSNull()] },
             events: ["renewal 59990 signed", "refund -43493 signed"]),
        // 3 milliunits x 50 % = 1.5: away from zero, 2.
        Case(name: "half a milliunit rounds away from zero", changes: { ["isUpgraded": false, "price": 3] },
             events: ["renewal 3 signed", "refund -2 signed"]),
        Case(name: "refund in full", changes: { ["isUpgraded": false, "revocationType": "REFUND_FULL", "revocationPercentage": NSNull()] },
             events: ["renewal 10990 signed", "refund -10990 signed"]),
        Case(name: "no revocationType: in full", changes: { ["isUpgraded": false, "revocationType": NSNull(), "revocationPercentage": NSNull()] },
             events: ["renewal 10990 signed", "refund -10990 signed"]),
        Case(name: "a family revoke moves no money", changes: { ["isUpgraded": false, "revocationType": "FAMILY_REVOKE"] },
             events: ["renewal 10990 signed"]),
        // The family member paid nothing, and its revocation is no refund either.
        Case(name: "a family-shared copy", changes: { ["isUpgraded": false, "inAppOwnershipType": "FAMILY_SHARED"] },
             events: ["renewal 0 signed"]),
        Case(name: "a free trial", changes: { ["isUpgraded": false, "revocationDate": NSNull(), "revocationReason": NSNull(),
                                                "offerDiscountType": "FREE_TRIAL", "price": 0] },
             events: ["renewal 0 signed"]),
        // An introductory offer at what Apple signed for it.
        Case(name: "pay as you go at the signed price", changes: { ["isUpgraded": false, "revocationDate": NSNull(), "price": 1990] },
             events: ["renewal 1990 signed"]),
        Case(name: "the first transaction is the purchase", changes: { ["isUpgraded": false, "revocationDate": NSNull(), "transactionId": "12345"] },
             events: ["purchase 10990 signed"]),
        // Another reason than 0 or 1 is no refund (the CSV's rule since its first version).
        Case(name: "cancellation reason 2", changes: { ["isUpgraded": false, "revocationReason": 2] }, events: ["renewal 10990 signed"]),
    ]

    @Test(arguments: cases) func eachRuleOnRealShapedSignedData(_ example: Case) async throws {
        let database = try await TestDatabase.create("journal")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        let transaction = try Self.transaction(example.changes())
        try await Self.write([transaction], connection)
        #expect(try await Self.journal(connection) == example.events)
        // The same Apple history again (and once more with the same rows) adds nothing.
        try await Self.write([transaction], connection)
        try await connection.execute("INSERT INTO iap.journal_backlog VALUES (\(transaction.transactionId))")
        #expect(try await ReconciliationStore(connection: connection).drainJournalBacklog() == 0)
        #expect(try await Self.journal(connection) == example.events)
        await connection.close()
        try await database.drop()
    }

    /// Apple's signed price wins over the catalog's list price; the catalog fills in only where
    /// Apple signed none (issue 45: preferring the catalog left every test green, and the CSV showed
    /// list prices in Apple's currency).
    @Test func theSignedPriceWinsOverTheCatalogs() async throws {
        let database = try await TestDatabase.create("journal-catalog")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.execute("""
            INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES ('com.example.product', 'auto_renewable', 'P1M', 4.99, 'USD')
            """)
        let signed = try Self.transaction(["isUpgraded": false, "revocationDate": NSNull(), "revocationReason": NSNull()])
        let unsigned = try Self.transaction(["isUpgraded": false, "revocationDate": NSNull(), "revocationReason": NSNull(),
                                             "transactionId": "23457", "price": NSNull(), "currency": NSNull(),
                                             "webOrderLineItemId": "34344"])
        try await Self.write([signed, unsigned], connection)
        #expect(try await Self.journal(connection, transaction: "23456") == ["renewal 10990 signed"])
        #expect(try await Self.journal(connection, transaction: "23457") == ["renewal 4990 catalog"])
        await connection.close()
        try await database.drop()
    }

    /// Signed data made before Apple signed prices (App Store Server API 1.10) carries none: the
    /// renewal is recorded at the catalog's price. Its price signed later changes no other term, and
    /// the difference is still an adjustment (docs/database.md, "The ledger": the price is a term).
    @Test func aSignedPriceLaterThanTheSignedTypeIsAnAdjustment() async throws {
        let database = try await TestDatabase.create("journal-price-later")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.execute("""
            INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES ('com.example.product', 'auto_renewable', 'P1M', 4.99, 'USD')
            """)
        let unrefunded: [String: Any] = ["isUpgraded": false, "revocationDate": NSNull(), "revocationReason": NSNull(),
                                         "revocationType": NSNull(), "revocationPercentage": NSNull()]
        let unpriced = try Self.transaction(unrefunded.merging(["price": NSNull(), "currency": NSNull()]) { $1 })
        try await Self.write([unpriced], asOf: Date(timeIntervalSince1970: 1_698_200_000), connection)
        try await Self.write([try Self.transaction(unrefunded)], asOf: Date(timeIntervalSince1970: 1_698_300_000), connection)
        // The catalog's 4.99, then Apple's signed 10.99: +6.00.
        #expect(try await Self.journal(connection, transaction: "23456") == ["renewal 4990 catalog", "adjustment 6000 signed"])
        await connection.close()
        try await database.drop()
    }

    @Test func aPercentageOutsideWhatApplePermitsIsAFormatErrorNeverAnAmount() throws {
        for percentage in [-1, 100_001, 2_147_483_647] {
            #expect(throws: AppleJSONError.self) { try Self.transaction(["revocationPercentage": percentage]) }
            do {
                _ = try Self.transaction(["revocationPercentage": percentage])
            } catch {
                #expect("\(error)".contains("revocationPercentage"))
            }
        }
        #expect(try Self.transaction(["revocationPercentage": 100_000]).revocationPercentage == 100_000)
        #expect(try Self.transaction(["revocationPercentage": 0]).revocationPercentage == 0)
    }

    /// A reversal: the opposite of the refund at the reversal's time, the refund kept; a second
    /// refund after it is an event of its own. And the journal refuses to change.
    @Test func aReversalIsAnEventOfItsOwnAndTheJournalIsAppendOnly() async throws {
        let database = try await TestDatabase.create("journal-reversal")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        let refunded = try Self.transaction(["isUpgraded": false])
        try await Self.write([refunded], connection)
        let reversedAt = Date(timeIntervalSince1970: 1_698_200_000)
        try await Self.reverse(refunded, at: reversedAt, connection)
        #expect(try await Self.journal(connection) == ["renewal 10990 signed", "refund -5495 signed", "refund_reversal 5495 signed"])
        let reversal = try await connection.query("SELECT event_time FROM iap.finance_journal WHERE event = 'refund_reversal'")[0]
        #expect(try reversal.decode("event_time", as: Date.self) == reversedAt)
        // Reversed twice (Apple resends): still one reversal.
        try await Self.reverse(refunded, at: reversedAt, connection)
        // The old REFUND read again (signed before the reversal): stale, it changes nothing.
        try await Self.write([refunded], connection)
        #expect(try await Self.journal(connection).count == 3)
        // Refunded again, in full this time.
        try await Self.write([try Self.transaction(["isUpgraded": false, "revocationType": "REFUND_FULL", "revocationDate": 1_698_300_000_000,
                                                    "signedDate": 1_698_300_000_000])], connection)
        #expect(try await Self.journal(connection) == [
            "renewal 10990 signed", "refund -5495 signed", "refund_reversal 5495 signed", "refund -10990 signed",
        ])
        for statement: PostgresQuery in ["UPDATE iap.finance_journal SET amount_milliunits = 0", "DELETE FROM iap.finance_journal",
                                         "TRUNCATE iap.finance_journal"] {
            await #expect(throws: PostgresError.self) { try await connection.execute(statement) }
        }
        #expect(try await Self.journal(connection).count == 4)
        await connection.close()
        try await database.drop()
    }

    /// Apple's signed REFUND, prorated, read after a later answer that could not show it (a
    /// consumable's, through verifyReceipt): the refund and all its terms, its reason, type and
    /// percentage, are the signed word's (docs/database.md, "The ledger"); found by the demo.
    @Test func aSignedRefundOlderThanTheRowsLastAnswerKeepsItsTerms() async throws {
        let database = try await TestDatabase.create("journal-refund-terms")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        let unrefunded = try Self.transaction(["isUpgraded": false, "revocationDate": NSNull(), "revocationReason": NSNull(),
                                               "revocationType": NSNull(), "revocationPercentage": NSNull()])
        try await Self.write([unrefunded], asOf: Date(timeIntervalSince1970: 1_698_200_000), connection)
        try await Self.write([try Self.transaction(["isUpgraded": false])], asOf: Date(timeIntervalSince1970: 1_698_300_000), connection)
        // 50 % of the signed 109.90: -54.95, never the whole.
        #expect(try await Self.journal(connection, transaction: "23456") == ["renewal 10990 signed", "refund -5495 signed"])
        let row = try await connection.query("SELECT cancellation_reason, revocation_type, revocation_percentage FROM iap.transactions")[0]
        #expect(try row.decode("cancellation_reason", as: Int?.self) == 1)
        #expect(try row.decode("revocation_type", as: String?.self) == "REFUND_PRORATED")
        #expect(try row.decode("revocation_percentage", as: Int?.self) == 50_000)
        await connection.close()
        try await database.drop()
    }

    /// A ledger row deleted outside the job and written again by Apple's word (docs/guarantees.md,
    /// "How a run works": such rows are put right): the events its transaction already has, one
    /// recorded before sales had keys, are its own, and only the difference is appended.
    @Test func aLedgerRowDeletedAndWrittenAgainKeepsItsEvents() async throws {
        let database = try await TestDatabase.create("journal-rewritten")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        // A renewal recorded before sales had keys, at the catalog's 4.99; its ledger row is gone.
        try await connection.execute("""
            INSERT INTO iap.finance_journal (event, event_time, recorded_at, account_id, product_id, product_type, transaction_id,
                original_transaction_id, web_order_line_item_id, price_milliunits, currency, amount_milliunits, amount_source)
            VALUES ('renewal', to_timestamp(1698148900), now(), 'payer', 'com.example.product', 'auto_renewable', '23456',
                    '12345', '34343', 4990, 'USD', 4990, 'catalog')
            """)
        try await Self.write([try Self.transaction(["isUpgraded": false, "revocationDate": NSNull(), "revocationReason": NSNull()])], connection)
        // Apple signed 10.99: +6.00 on the renewal recorded, never a second renewal.
        #expect(try await Self.journal(connection, transaction: "23456") == ["renewal 4990 catalog", "adjustment 6000 signed"])
        await connection.close()
        try await database.drop()
    }

    /// Random histories of Apple events for random customers: the journal's net per currency is
    /// the history's own arithmetic, worked out here without the journal's SQL.
    @Test func theJournalsNetIsTheHistorysArithmetic() async throws {
        let seed = FuzzSeed("theJournalsNetIsTheHistorysArithmetic")
        var generator = seed.generator
        let database = try await TestDatabase.create("journal-property")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        var expected: [String: Int64] = [:]
        let currencies = ["USD", "EUR", "JPY"]
        for chain in 0..<40 {
            let currency = currencies[Int(generator.next() % 3)]
            let original = "9\(chain)000"
            let family = generator.next() % 6 == 0
            var history: [JWSTransaction] = []
            for index in 0..<Int(1 + generator.next() % 4) {
                let price = Int64(generator.next() % 100_000)
                var fields: [String: Any] = [
                    "transactionId": index == 0 ? original : "\(original)\(index)", "originalTransactionId": original,
                    "productId": "pro", "bundleId": "com.example", "type": "Auto-Renewable Subscription", "quantity": 1,
                    "purchaseDate": 1_700_000_000_000 + Int64(chain) * 1000 + Int64(index), "expiresDate": 1_800_000_000_000,
                    "price": price, "currency": currency, "inAppOwnershipType": family ? "FAMILY_SHARED" : "PURCHASED",
                    "environment": "Sandbox", "signedDate": 1_700_000_000_000,
                ]
                let paid = family ? 0 : price
                expected[currency, default: 0] += paid
                switch generator.next() % 6 {
                case 0:  // refunded in full
                    fields["revocationDate"] = 1_750_000_000_000
                    fields["revocationReason"] = 0
                    fields["revocationType"] = "REFUND_FULL"
                    expected[currency, default: 0] -= family ? 0 : paid
                case 1:  // refunded in part: the rounding worked out in integers, half away from zero
                    let percentage = Int64(generator.next() % 100_001)
                    fields["revocationDate"] = 1_750_000_000_000
                    fields["revocationReason"] = 1
                    fields["revocationType"] = "REFUND_PRORATED"
                    fields["revocationPercentage"] = percentage
                    let (quotient, remainder) = (paid * percentage).quotientAndRemainder(dividingBy: 100_000)
                    expected[currency, default: 0] -= family ? 0 : quotient + (remainder * 2 >= 100_000 ? 1 : 0)
                case 2:  // a family revoke
                    fields["revocationDate"] = 1_750_000_000_000
                    fields["revocationReason"] = 0
                    fields["revocationType"] = "FAMILY_REVOKE"
                case 3:  // an upgrade
                    fields["revocationDate"] = 1_750_000_000_000
                    fields["revocationReason"] = 0
                    fields["isUpgraded"] = true
                default: break
                }
                history.append(try JWSTransaction(json: Array(JSONSerialization.data(withJSONObject: fields))))
            }
            // Learned in pieces, some twice, as runs and notifications learn it.
            let cut = Int(generator.next() % UInt64(history.count + 1))
            try await Self.write(Array(history[..<cut]), account: "c\(chain)", connection)
            try await Self.write(history, account: "c\(chain)", connection)
            if generator.next() % 2 == 0 { try await Self.write(history, account: "c\(chain)", connection) }
            // Some refunds reversed: the reversal gives back exactly what the refund took.
            for transaction in history where transaction.revocationDate != nil && generator.next() % 3 == 0 {
                try await Self.reverse(transaction, account: "c\(chain)", at: Date(timeIntervalSince1970: 1_760_000_000), connection)
                let refunded = try await connection.query("""
                    SELECT coalesce(sum(amount_milliunits), 0)::bigint AS taken FROM iap.finance_journal
                    WHERE transaction_id = \(transaction.transactionId) AND event = 'refund'
                    """)[0].decode("taken", as: Int64.self)
                expected[currency, default: 0] -= refunded
            }
        }
        let nets = try await connection.query("""
            SELECT currency, sum(amount_milliunits)::bigint AS net FROM iap.finance_journal GROUP BY currency
            """)
        var actual: [String: Int64] = [:]
        for row in nets { actual[try row.decode("currency")] = try row.decode("net") }
        #expect(actual.filter { $0.value != 0 } == expected.filter { $0.value != 0 }, "\(seed)")
        #expect(try await connection.query("SELECT 1 FROM iap.finance_journal").count > 40, "the histories recorded nothing")
        await connection.close()
        try await database.drop()
    }
}
