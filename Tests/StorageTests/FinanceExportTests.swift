import Logging
import CivilCalendar
import Foundation
import Postgres
import Reconciliation
import SchemaMigrations
import Storage
import Testing
import TestSupport

/// The finance CSV against golden files written by hand from the seeded rows (Golden/README.md says
/// how, row by row); they are never regenerated from the export they check.
@Suite struct FinanceExportTests {
    static let golden = URL(filePath: #filePath).deletingLastPathComponent().appending(path: "Golden")

    /// A ledger with every kind of event, and the traps: an upgrade is not a refund, a restore is
    /// not a purchase, a refund of an old purchase lands in the period of the refund.
    static func populate(_ connection: PostgresConnection) async throws {
        try await connection.execute("""
            INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES
              ('pro.monthly', 'auto_renewable', NULL, 9.99, 'USD'),
              ('pro.yearly', 'auto_renewable', NULL, 79.99, 'USD'),
              ('lifetime', 'non_consumable', NULL, 149.00, 'USD'),
              ('coins.100', 'consumable', NULL, 0.99, 'EUR'),
              ('season.pass', 'non_renewing', '1 mon', 4.99, 'EUR')
            """)
        try await connection.execute("""
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date,
                original_purchase_date, expires_date, cancellation_date, cancellation_reason, is_upgraded, is_trial_period,
                is_in_intro_offer_period, quantity, web_order_line_item_id, subscription_group_identifier, offer_code_ref_name,
                promotional_offer_id, ownership_type, environment) VALUES
            -- a subscription: trial purchase in October, renewals in November
            ('1000', 'alice', '1000', 'pro.monthly', '2026-10-05 10:00:00Z', '2026-10-05 10:00:00Z', '2026-11-05 10:00:00Z', NULL, NULL, false, true, false, 1, '5000', 'g1', NULL, NULL, 'PURCHASED', 'Production'),
            ('1001', 'alice', '1000', 'pro.monthly', '2026-11-05 10:00:00Z', '2026-10-05 10:00:00Z', '2026-12-05 10:00:00Z', NULL, NULL, false, false, false, 1, '5001', 'g1', 'AUTUMN', 'promo.1', 'PURCHASED', 'Production'),
            -- upgraded to yearly: the monthly period is cancelled as an upgrade, not refunded
            ('2000', 'bob, "the builder"', '2000', 'pro.monthly', '2026-11-01 00:00:00Z', '2026-11-01 00:00:00Z', '2026-12-01 00:00:00Z', '2026-11-10 12:00:00Z', 0, true, false, false, 1, '6000', 'g1', NULL, NULL, 'PURCHASED', 'Production'),
            ('2100', 'bob, "the builder"', '2100', 'pro.yearly', '2026-11-10 12:00:00Z', '2026-11-10 12:00:00Z', '2027-11-10 12:00:00Z', NULL, NULL, false, false, false, 1, '6100', 'g1', NULL, NULL, 'PURCHASED', 'Production'),
            -- a refund in November of a purchase from September
            ('3000', 'carol', '3000', 'lifetime', '2026-09-01 08:00:00Z', '2026-09-01 08:00:00Z', NULL, '2026-11-15 09:30:00Z', 1, NULL, false, false, 1, NULL, NULL, NULL, NULL, 'PURCHASED', 'Production'),
            -- a restore of a non-consumable: not a purchase
            ('3001', 'carol', '3000', 'lifetime', '2026-11-16 09:30:00Z', '2026-09-01 08:00:00Z', NULL, NULL, NULL, NULL, false, false, 1, NULL, NULL, NULL, NULL, 'PURCHASED', 'Production'),
            -- consumables, one refunded for reason 0 inside the period
            ('4000', 'dave', '4000', 'coins.100', '2026-11-20 20:00:00Z', '2026-11-20 20:00:00Z', NULL, '2026-11-21 20:00:00Z', 0, NULL, false, false, 3, NULL, NULL, NULL, NULL, 'PURCHASED', 'Production'),
            -- a product missing from the catalog: no price
            ('5000', 'erin', '5000', 'mystery', '2026-11-20 20:00:00Z', '2026-11-20 20:00:00Z', NULL, NULL, NULL, NULL, false, false, 1, NULL, NULL, NULL, NULL, 'FAMILY_SHARED', 'Production'),
            -- sandbox: only with --include-sandbox
            ('6000', 'reviewer', '6000', 'season.pass', '2026-11-02 00:00:00Z', '2026-11-02 00:00:00Z', NULL, NULL, NULL, NULL, false, false, 1, NULL, NULL, NULL, NULL, 'PURCHASED', 'Sandbox'),
            -- outside the period
            ('7000', 'frank', '7000', 'coins.100', '2026-12-01 00:00:00Z', '2026-12-01 00:00:00Z', NULL, NULL, NULL, NULL, false, false, 1, NULL, NULL, NULL, NULL, 'PURCHASED', 'Production')
            """)
        // Written by SQL, not by the job's ledger upsert: recorded as the journal's migration records a ledger it finds.
        try await connection.execute("INSERT INTO iap.journal_backlog SELECT transaction_id FROM iap.transactions")
        _ = try await ReconciliationStore(connection: connection).drainJournalBacklog()
    }

    static func export(_ connection: PostgresConnection, from: String, to: String, includeSandbox: Bool) async throws -> String {
        var text = CSV.row(FinanceReport.columns)
        var recorded = Set<String>()
        _ = try await FinanceLedger.forEachEvent(
            connection: connection, by: .event, from: ISO8601DateFormatter().date(from: from)!, to: ISO8601DateFormatter().date(from: to)!,
            includeSandbox: includeSandbox, asOf: Date()) { event in
            var fields = FinanceReport.fields(event)
            let column = FinanceReport.columns.firstIndex(of: "recorded_at")!
            recorded.insert(fields[column] ?? "")
            fields[column] = "RECORDED_AT"
            text += CSV.row(fields)
        }
        // The one column the golden files cannot hold: every row recorded at once, with milliseconds.
        #expect(recorded.count <= 1 && recorded.allSatisfy { $0.hasSuffix("Z") && $0.count == 24 }, "\(recorded)")
        return text
    }

    static func compare(_ actual: String, golden name: String) throws {
        let url = golden.appending(path: name)
        let expected = try String(contentsOf: url, encoding: .utf8)
        #expect(actual == expected, "differs from Golden/\(name)")
    }

    @Test func novemberWithoutSandbox() async throws {
        let database = try await TestDatabase.create("finance")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await Self.populate(connection)
        let csv = try await Self.export(connection, from: "2026-11-01T00:00:00Z", to: "2026-12-01T00:00:00Z", includeSandbox: false)
        try Self.compare(csv, golden: "finance-2026-11.csv")
        // The traps, asserted directly too.
        #expect(!csv.contains("refund,2026-11-10"))  // the upgrade
        #expect(!csv.contains(",3001,"))  // the restore
        #expect(csv.contains("refund,2026-11-15T09:30:00.000Z,carol,lifetime"))
        #expect(csv.contains("\"bob, \"\"the builder\"\"\""))
        #expect(!csv.contains("Sandbox"))
        #expect(csv.hasPrefix(FinanceReport.columns.joined(separator: ",") + "\r\n"))
        await connection.close()
        try await database.drop()
    }

    @Test func novemberWithSandbox() async throws {
        let database = try await TestDatabase.create("financesandbox")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await Self.populate(connection)
        let csv = try await Self.export(connection, from: "2026-11-01T00:00:00Z", to: "2026-12-01T00:00:00Z", includeSandbox: true)
        try Self.compare(csv, golden: "finance-2026-11-with-sandbox.csv")
        #expect(csv.contains(",6000,6000,"))
        // The whole autumn: the September purchase and October trial appear as purchases.
        let autumn = try await Self.export(connection, from: "2026-09-01T00:00:00Z", to: "2026-12-01T00:00:00Z", includeSandbox: false)
        try Self.compare(autumn, golden: "finance-2026-09-to-11.csv")
        await connection.close()
        try await database.drop()
    }

    /// What a period of the journal lists, as `event transaction_id`, in the export's order.
    static func listed(
        _ connection: PostgresConnection, by basis: FinanceLedger.PeriodBasis, from: String, to: String, asOf: String = "2027-01-01T00:00:00Z",
        pageSize: Int = 5_000
    ) async throws -> [String] {
        var listed: [String] = []
        _ = try await FinanceLedger.forEachEvent(
            connection: connection, by: basis, from: try #require(Timestamp.parse(from)), to: try #require(Timestamp.parse(to)),
            includeSandbox: false, asOf: try #require(Timestamp.parse(asOf)), pageSize: pageSize) { listed.append("\($0.kind.rawValue) \($0.transactionId)") }
        return listed
    }

    /// An export is read in pages, each after the last row of the one before: pages of any size
    /// list every event once, in the order of one page, through ties of time to the microsecond,
    /// of transaction, and of event (a second refund after a reversal).
    @Test func pagesOfAnySizeListEveryEventOnceInOrder() async throws {
        let database = try await TestDatabase.create("financepages")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.execute("""
            INSERT INTO iap.finance_journal (event, occurrence, event_time, recorded_at, account_id, product_id, product_type, transaction_id, amount_source)
            SELECT e.event, e.occurrence, timestamptz '2026-11-03 10:00Z' + (i % 4) * interval '0.000001 second',
                   timestamptz '2026-11-20 02:00Z' + (i % 3) * interval '0.000001 second', 'ana', 'coins.100', 'consumable', 't' || (i % 9), 'signed'
            FROM generate_series(0, 35) i,
                 LATERAL (VALUES ('purchase', 1), ('refund', 1), ('refund_reversal', 1), ('refund', 2)) AS e(event, occurrence)
            WHERE i < 9 OR e.event <> 'purchase'
            ON CONFLICT DO NOTHING
            """)
        let whole = ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")
        for basis in FinanceLedger.PeriodBasis.allCases {
            let one = try await Self.listed(connection, by: basis, from: whole.0, to: whole.1)
            #expect(one.count == 36)
            // Each transaction's four events, a second refund among them, once each.
            #expect(Dictionary(grouping: one) { $0.split(separator: " ")[1] }.values.allSatisfy { $0.count == 4 })
            for size in [1, 2, 5, 35, 36, 37] {
                #expect(try await Self.listed(connection, by: basis, from: whole.0, to: whole.1, pageSize: size) == one, "\(basis) pages of \(size)")
            }
        }
        await connection.close()
        try await database.drop()
    }

    /// By recorded is by `recorded_at`: ana's refund of 2026-11-28, learned on 2026-12-03, is in
    /// November by event and in December by recorded, and neither in December by event nor in
    /// November by recorded. By recorded, the recorded time orders first, then the event's own;
    /// `asOf` bounds both.
    @Test func byRecordedSelectsWhatWasRecordedInThePeriodWhateverItsOwn() async throws {
        let database = try await TestDatabase.create("financerecorded")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        // Appended at the story's times (the journal refuses changes, not rows).
        try await connection.execute("""
            INSERT INTO iap.finance_journal (event, event_time, recorded_at, account_id, product_id, product_type, transaction_id, amount_source) VALUES
              ('purchase', '2026-11-10 10:00Z', '2026-11-10 10:05Z', 'ana', 'coins.100', 'consumable', '101', 'signed'),
              ('refund',   '2026-11-28 09:00Z', '2026-12-03 02:00Z', 'ana', 'coins.100', 'consumable', '101', 'signed'),
              ('purchase', '2026-10-20 08:00Z', '2026-11-15 02:00Z', 'ben', 'coins.100', 'consumable', '102', 'signed'),
              ('purchase', '2026-12-02 12:00Z', '2026-12-03 02:00Z', 'cy',  'coins.100', 'consumable', '103', 'signed'),
              ('purchase', '2026-12-01 00:00Z', '2026-12-03 02:00Z', 'dee', 'coins.100', 'consumable', '104', 'signed'),
              ('purchase', '2026-10-01 00:00Z', '2026-12-20 02:00Z', 'eve', 'coins.100', 'consumable', '105', 'signed')
            """)
        let (november, december) = (("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))
        #expect(try await Self.listed(connection, by: .event, from: november.0, to: november.1) == ["purchase 101", "refund 101"])
        #expect(try await Self.listed(connection, by: .recorded, from: november.0, to: november.1) == ["purchase 101", "purchase 102"])
        #expect(try await Self.listed(connection, by: .event, from: december.0, to: december.1) == ["purchase 104", "purchase 103"])
        #expect(try await Self.listed(connection, by: .recorded, from: december.0, to: december.1)
                == ["refund 101", "purchase 104", "purchase 103", "purchase 105"])
        // As of November's close, the refund was not known; as of 2026-12-10, eve's late purchase was not.
        #expect(try await Self.listed(connection, by: .event, from: november.0, to: november.1, asOf: "2026-12-01T06:00:00Z") == ["purchase 101"])
        #expect(try await Self.listed(connection, by: .recorded, from: december.0, to: december.1, asOf: "2026-12-10T00:00:00Z")
                == ["refund 101", "purchase 104", "purchase 103"])
        await connection.close()
        try await database.drop()
    }
}
