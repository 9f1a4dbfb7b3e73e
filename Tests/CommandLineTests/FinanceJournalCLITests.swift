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
@testable import WorldSupport

/// `export-finance` as finance uses it, through the executable: a month exported, then Apple
/// reverses a refund in it, and the month exported again as of the first time is the same file.
@Suite struct FinanceJournalCLITests {
    /// A consumable bought three days ago and refunded an hour ago (V2 REFUND), in a run.
    static func refunded(_ world: RunWorld) async throws {
        try await V2Notifications.gamer(world)
        let refund = try V2Notifications.body(
            "REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: world.nowMs - 3_600_000))
        #expect(try await V2Notifications.ingest(world, [refund]) == 1)
        _ = try await world.run(V2Notifications.options(world))
    }

    static func reversed(_ world: RunWorld) async throws {
        let reversal = try V2Notifications.body("REFUND_REVERSED", transaction: V2Notifications.consumable("91", world: world))
        #expect(try await V2Notifications.ingest(world, [reversal]) == 1)
        _ = try await world.run(V2Notifications.options(world))
    }

    static func period(_ world: RunWorld) -> [String] {
        ["--from", Timestamp.day(world.now.addingTimeInterval(-7 * 86_400)), "--to", Timestamp.day(world.now.addingTimeInterval(2 * 86_400))]
    }

    @Test func anExportIsReproducedByteForByteAsOfItsTime() async throws {
        try await RunWorld.with("journal-as-of") { world in
            try await Self.refunded(world)
            let environment = ["DATABASE_URL": world.database.connectionString]
            let first = try await CLIProcess.run(["export-finance"] + Self.period(world), environment: environment)
            #expect(first.status == 0, "\(first.stderr)")
            let asOf = try #require(first.stderr.firstMatch(of: /finance\.as_of=(\S+)/).map { String($0.1) }, "\(first.stderr)")
            #expect(first.stdout.contains("\r\nrefund,") && !first.stdout.contains("refund_reversal"), "\(first.stdout)")

            try await Self.reversed(world)
            let now = try await CLIProcess.run(["export-finance"] + Self.period(world), environment: environment)
            let again = try await CLIProcess.run(["export-finance", "--as-of", asOf] + Self.period(world), environment: environment)
            #expect(again.status == 0)
            #expect(again.stdout == first.stdout, "the export as of \(asOf) changed")
            // Today's export has the reversal, at its own time, and still the refund of the same month.
            #expect(now.stdout.contains("\r\nrefund,") && now.stdout.contains("\r\nrefund_reversal,"), "\(now.stdout)")
            let reversal = try #require(now.stdout.components(separatedBy: "\r\n").first { $0.hasPrefix("refund_reversal,") })
            #expect(reversal.contains(",EUR,0.99,signed,"), "\(reversal)")

            let bad = try await CLIProcess.run(["export-finance", "--as-of", "last tuesday"] + Self.period(world), environment: environment)
            #expect(bad.status == 2 && bad.stderr.contains("--as-of"), "\(bad.stderr)")

            // An hour ahead, more events may still be recorded as of then: refused, and nothing written.
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let file = world.reportRoot.appending(path: "future.csv").path
            let future = try await CLIProcess.run(
                ["export-finance", "--as-of", Timestamp.format(Date().addingTimeInterval(3_600)), "--output", file] + Self.period(world),
                environment: environment)
            #expect(future.status == 2, "\(future.stderr)")
            #expect(future.stderr.contains("configuration.invalid") && future.stderr.contains("journal's last recorded moment"), "\(future.stderr)")
            #expect(!FileManager.default.fileExists(atPath: file))
        }
    }

    /// The rows of an export as `event transaction_id`, in its order.
    static func rows(_ csv: String) -> [String] {
        csv.components(separatedBy: "\r\n").dropFirst().filter { !$0.isEmpty }.map { row in
            let cells = row.split(separator: ",", omittingEmptySubsequences: false)
            return "\(cells[0]) \(cells[5])"
        }
    }

    /// A month's close, through the executable: a purchase closed by event, then its refund (dated an
    /// hour after it, in the closed period) learned after the close. `--by recorded` from the close
    /// lists the refund and not the purchase; the closed period made again by event lists both, and
    /// the refund's period is not the recorded one (nothing was recorded then), nor is it in the
    /// events dated since the close. `--as-of` the close bounds `--by recorded` too.
    @Test func byRecordedListsWhatWasLearnedSinceTheCloseWhateverItsPeriod() async throws {
        try await RunWorld.with("journal-by-recorded") { world in
            // Bought three days ago, stored from the receipt by a run: the journal records the purchase.
            try await world.addReceipt("gamer", spec: ["generate": ["purchases": [
                ["product_id": "coins.100", "transaction_id": "91", "purchase_ms": world.nowMs - 3 * world.dayMs],
            ]]])
            _ = try await world.run(V2Notifications.options(world))
            let environment = ["DATABASE_URL": world.database.connectionString]
            let closed = ["--from", Timestamp.format(world.now.addingTimeInterval(-4 * 86_400)), "--to", Timestamp.format(world.now.addingTimeInterval(-2 * 86_400))]
            let close = try await CLIProcess.run(["export-finance"] + closed, environment: environment)
            #expect(Self.rows(close.stdout) == ["purchase 91"], "\(close.stdout)")
            let closedAt = try #require(close.stderr.firstMatch(of: /finance\.as_of=(\S+)/).map { String($0.1) }, "\(close.stderr)")

            let refund = try V2Notifications.body(
                "REFUND", transaction: V2Notifications.consumable("91", world: world, revokedAt: world.nowMs - 3 * world.dayMs + 3_600_000))
            #expect(try await V2Notifications.ingest(world, [refund]) == 1)
            _ = try await world.run(V2Notifications.options(world))
            let sinceClose = ["--from", closedAt, "--to", Timestamp.format(world.now.addingTimeInterval(86_400))]
            func export(_ arguments: [String]) async throws -> [String] {
                let result = try await CLIProcess.run(["export-finance"] + arguments, environment: environment)
                #expect(result.status == 0, "\(arguments): \(result.stderr)")
                return Self.rows(result.stdout)
            }
            // The refund, and the sale adjusted to Apple's signed price the refund brought (0.99 EUR;
            // the catalog has none, so the sale had no amount), dated with the sale: what the close
            // must book now.
            let recorded = try await export(["--by", "recorded"] + sinceClose)
            #expect(recorded == ["adjustment 91", "refund 91"], "\(recorded)")
            let byEvent = try await export(["--by", "event"] + closed)
            #expect(byEvent == ["adjustment 91", "purchase 91", "refund 91"], "\(byEvent)")
            #expect(try await export(["--by", "recorded"] + closed) == [])
            #expect(try await export(sinceClose) == [])
            #expect(try await export(["--by", "recorded", "--as-of", closedAt] + sinceClose) == [])
        }
    }

    /// Signed by the simulator, as a V2 REFUND brings it through a run: Apple gave back 72.5 % of
    /// 0.99 EUR. 990 x 0.725 = 717.75 milliunits, half away from zero: 718, so -0.718 in the CSV,
    /// with Apple's raw type and percentage and the storefront beside it.
    @Test func aProratedRefundSignedBySimulatorReachesTheCSVAsMoneyMoved() async throws {
        try await RunWorld.with("journal-prorated") { world in
            try await V2Notifications.gamer(world)
            var transaction = V2Notifications.consumable("91", world: world, revokedAt: world.nowMs - 3_600_000)
            transaction["revocationType"] = "REFUND_PRORATED"
            transaction["revocationPercentage"] = 72_500
            transaction["storefront"] = "FRA"
            #expect(try await V2Notifications.ingest(world, [try V2Notifications.body("REFUND", transaction: transaction)]) == 1)
            _ = try await world.run(V2Notifications.options(world))
            let result = try await CLIProcess.run(["export-finance"] + Self.period(world), environment: ["DATABASE_URL": world.database.connectionString])
            let refund = try #require(result.stdout.components(separatedBy: "\r\n").first { $0.hasPrefix("refund,") }, "\(result.stdout)")
            #expect(refund.contains(",0.99,EUR,-0.718,signed,REFUND_PRORATED,72500,FRA,"), "\(refund)")
            // The ledger keeps Apple's raw values.
            let row = try await world.connection.query("SELECT revocation_type, revocation_percentage, storefront FROM iap.transactions WHERE transaction_id = '91'")[0]
            #expect(try row.decode("revocation_type", as: String?.self) == "REFUND_PRORATED")
            #expect(try row.decode("revocation_percentage", as: Int?.self) == 72_500)
            #expect(try row.decode("storefront", as: String?.self) == "FRA")
        }
    }

    /// `--summary`: count and amount per currency and event, and the net: worked out by hand from
    /// the history (0.99 EUR bought, refunded, the refund reversed: net 0.99).
    @Test func theSummaryTiesOutPerCurrencyAndEvent() async throws {
        try await RunWorld.with("journal-summary") { world in
            try await Self.refunded(world)
            try await Self.reversed(world)
            let result = try await CLIProcess.run(
                ["export-finance", "--summary"] + Self.period(world), environment: ["DATABASE_URL": world.database.connectionString])
            #expect(result.status == 0, "\(result.stderr)")
            let lines = result.stdout.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            #expect(lines.contains(["EUR", "purchase", "1", "0.99"]), "\(result.stdout)")
            #expect(lines.contains(["EUR", "refund", "1", "-0.99"]), "\(result.stdout)")
            #expect(lines.contains(["EUR", "refund_reversal", "1", "0.99"]), "\(result.stdout)")
            #expect(lines.contains(["EUR", "net", "0.99"]), "\(result.stdout)")
            #expect(!result.stdout.contains("event,event_time"), "no CSV without --output")

            // Support sees the same money in explain, as text and as JSON.
            let explained = try await CLIProcess.run(["explain", "gamer"], environment: ["DATABASE_URL": world.database.connectionString])
            let money = try #require(explained.stdout.components(separatedBy: "\nMoney (the finance journal), as it moved\n").last)
            #expect(money.contains("refund_reversal") && money.contains("-0.99") && money.contains("signed"), "\(explained.stdout)")
            let json = try await CLIProcess.run(["explain", "gamer", "--json"], environment: ["DATABASE_URL": world.database.connectionString])
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            // The consumable's history; the lifetime purchase (90) beside it has no price anywhere: its amount is null.
            let all = try #require(document["money"] as? [[String: Any]])
            #expect(all.contains { $0["transaction_id"] as? String == "90" && $0["amount"] is NSNull && $0["amount_source"] as? String == "none" })
            let events = all.filter { $0["transaction_id"] as? String == "91" }
            #expect(events.map { $0["event"] as? String } == ["purchase", "refund", "refund_reversal"])
            #expect(events.map { $0["amount"] as? String } == ["0.99", "-0.99", "0.99"])
        }
    }

    /// `--log-level` filters what is written: `export-finance` says `finance.exported` at info, so
    /// info and trace show it and warning does not; error still shows a failure's one error line.
    @Test func theLogLevelFiltersWhatIsWritten() async throws {
        try await RunWorld.with("log-level") { world in
            let environment = ["DATABASE_URL": world.database.connectionString]
            for (level, shown) in [("trace", true), ("info", true), ("warning", false), ("error", false)] {
                let result = try await CLIProcess.run(["export-finance", "--log-level", level] + Self.period(world), environment: environment)
                #expect(result.status == 0, "\(level): \(result.stderr)")
                #expect(result.stderr.contains(" info finance.exported ") == shown, "\(level): \(result.stderr)")
            }
            let failing = try await CLIProcess.run(
                ["export-finance", "--log-level", "error"] + Self.period(world),
                environment: ["DATABASE_URL": "host=127.0.0.1 port=1 dbname=none user=none connect_timeout=2"])
            #expect(failing.status == 1 && failing.stderr.contains(" error "), "\(failing.stderr)")
        }
    }
}
