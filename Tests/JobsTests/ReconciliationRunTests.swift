import AppStoreModels
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// A world of accounts with known truth, run against real PostgreSQL and the simulator.
@Suite struct ReconciliationRunTests {
    /// Builds the world every test here starts from and returns what each account should become.
    static func populate(_ world: RunWorld) async throws {
        // new: a purchase the app server never stored -> grant
        try await world.addReceipt("new", spec: ["generate": ["subscriptions": [world.subscription(original: "100", renewals: 1, endDays: 25)]]])
        // renewed: stored one period behind -> extend
        try await world.addReceipt("renewed", spec: ["generate": ["subscriptions": [world.subscription(original: "200", renewals: 4, endDays: 20)]]])
        try await world.store(Entitlement(accountId: "renewed", productId: "pro.monthly", originalTransactionId: "200",
                                          latestTransactionId: "200002", state: .active, expiresAt: world.expiry(endDays: -10),
                                          autoRenew: true, autoRenewProductId: "pro.monthly", environment: "Production", ownershipType: "PURCHASED"))
        // refunded: Apple cancelled the current period -> revoke
        try await world.addReceipt("refunded", spec: ["generate": ["subscriptions": [world.subscription(
            original: "300", renewals: 2, endDays: 15, extra: ["cancel": ["at_ms": world.nowMs - world.dayMs, "reason": 1]])]]])
        try await world.store(Entitlement(accountId: "refunded", productId: "pro.monthly", originalTransactionId: "300",
                                          latestTransactionId: "300001", state: .active, expiresAt: world.expiry(endDays: 15),
                                          autoRenew: true, autoRenewProductId: "pro.monthly", environment: "Production", ownershipType: "PURCHASED"))
        // unchanged: stored exactly as Apple says
        try await world.addReceipt("unchanged", spec: ["generate": ["subscriptions": [world.subscription(original: "400", renewals: 2, endDays: 9)]]])
        try await world.store(Entitlement(accountId: "unchanged", productId: "pro.monthly", originalTransactionId: "400",
                                          latestTransactionId: "400001", state: .active, expiresAt: world.expiry(endDays: 9),
                                          autoRenew: true, autoRenewProductId: "pro.monthly", environment: "Production", ownershipType: "PURCHASED"))
        // orphan: a stored lifetime purchase no receipt supports -> revoke; its subscription -> grant
        try await world.addReceipt("orphan", spec: ["generate": ["subscriptions": [world.subscription(original: "500", renewals: 1, endDays: 5)]]])
        try await world.store(Entitlement(accountId: "orphan", productId: "lifetime", originalTransactionId: "999", state: .active))
        // Accounts whose verification fails keep their rows exactly, whatever the failure.
        let untouchable = Entitlement(accountId: "x", productId: "pro.monthly", originalTransactionId: "1", state: .active,
                                      expiresAt: world.expiry(endDays: -30))
        try await world.addReceipt("transient", spec: ["faults": [["http": 503]], "repeat_faults": true,
                                                       "generate": ["subscriptions": [world.subscription(original: "600", endDays: -5)]]])
        try await world.store({ var e = untouchable; e.accountId = "transient"; return e }())
        try await world.addReceipt("permanent", spec: ["faults": [["status": 21010]], "repeat_faults": true])
        try await world.store({ var e = untouchable; e.accountId = "permanent"; return e }())
        try await world.addReceipt("invalid", "this is not base64!")
        try await world.store({ var e = untouchable; e.accountId = "invalid"; return e }())
        // partly verified: one receipt verifies and shows an expiry; the other fails -> no correction at all
        try await world.addReceipt("partial", spec: ["generate": ["subscriptions": [world.subscription(original: "700", endDays: -10)]]])
        try await world.addReceipt("partial", spec: ["faults": [["status": 21003]], "repeat_faults": true])
        try await world.store({ var e = untouchable; e.accountId = "partial"; return e }())
        // lifetime + consumables, two receipts of one account
        try await world.addReceipt("buyer", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "800", "purchase_ms": world.nowMs - 9 * world.dayMs]]]])
        try await world.addReceipt("buyer", spec: ["generate": ["purchases": [
            ["product_id": "coins", "transaction_id": "801", "purchase_ms": world.nowMs - 2 * world.dayMs]]]])
        try await world.connection.execute("INSERT INTO iap.products (product_id, type) VALUES ('coins', 'consumable')")
        try await world.catalog(["lifetime": .nonConsumable])
    }

    @Test func aRunCorrectsWhatApplesAnswersSayAndNothingElse() async throws {
        try await RunWorld.with("run") { world in
            try await Self.populate(world)
            let before = try await world.entitlements()

            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed)
            #expect(summary.status == .completed)
            #expect(summary.accountsProcessed == 10)
            #expect(summary.accountsDeferred == 1)
            #expect(summary.accountsInvalidReceipt == 1)
            #expect(summary.accountsFailed == 2)  // permanent and partial

            let kinds = try await world.corrections(run: summary.runId)
            #expect(kinds == [
                "new": ["grant"], "renewed": ["extend"], "refunded": ["revoke"], "orphan": ["grant", "revoke"], "buyer": ["grant"],
            ])
            let after = try await world.entitlements()
            #expect(after["new/pro.monthly"]?.state == .active)
            #expect(after["new/pro.monthly"]?.expiresAt == world.expiry(endDays: 25))
            #expect(after["renewed/pro.monthly"]?.expiresAt == world.expiry(endDays: 20))
            #expect(after["renewed/pro.monthly"]?.latestTransactionId == "200003")
            #expect(after["refunded/pro.monthly"]?.state == .refunded)
            #expect(after["refunded/pro.monthly"]?.entitled == false)
            #expect(after["refunded/pro.monthly"]?.refundedAt == Date(timeIntervalSince1970: Double(world.nowMs - world.dayMs) / 1000))
            #expect(after["orphan/lifetime"]?.entitled == false)
            #expect(after["buyer/lifetime"]?.state == .active)
            #expect(after["buyer/coins"] == nil)  // consumables: ledger only
            #expect(after["unchanged/pro.monthly"] == before["unchanged/pro.monthly"])
            for account in ["transient", "permanent", "invalid", "partial"] {
                #expect(after["\(account)/pro.monthly"] == before["\(account)/pro.monthly"], "\(account) must not change")
            }
            // Every correction was applied together with its entitlement.
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status <> 'applied' OR applied_at IS NULL") == 0)

            // The ledger holds every transaction once: 1 + 4 + 2 + 2 + 1 + 3 (partial's good receipt) + 2.
            #expect(try await world.count("SELECT count(*) FROM iap.transactions") == 15)
            #expect(try await world.count("SELECT count(DISTINCT transaction_id) FROM iap.transactions") == 15)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE cancellation_date IS NOT NULL") == 1)

            // Receipts learned their status.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'verified' AND last_status = 0 AND last_verified_at IS NOT NULL") == 8)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'deferred' AND next_attempt_at > now()") == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_status = 21010") == 1)

            // The report.
            let directory = try #require(world.options().reportDirectory?.deletingLastPathComponent())
            let reports = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            #expect(reports.count == 1)
            let report = directory.appending(path: reports[0])
            let failures = try String(contentsOf: report.appending(path: "failures.csv"), encoding: .utf8)
            #expect(failures.split(separator: "\r\n").count == 1 + 4)  // header + transient, permanent, invalid, partial's 21003
            let corrections = try String(contentsOf: report.appending(path: "corrections.csv"), encoding: .utf8)
            #expect(corrections.split(separator: "\r\n").count == 1 + 6)
            #expect(corrections.contains("refund on "))
            let summaryJSON = try JSONSerialization.jsonObject(with: Data(contentsOf: report.appending(path: "summary.json"))) as? [String: Any]
            #expect((summaryJSON?["outcomes"] as? [String: Int])?["corrected"] == 5)
            #expect((summaryJSON?["pollingBlindSpots"] as? String)?.contains("consumable") == true)

            // A second pass over the same answers writes no correction, and the ledger does not grow.
            let ledgerUpdated = try await world.count("SELECT count(*) FROM iap.transactions WHERE updated_at > first_seen_at")
            let (second, _) = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: [], receiptIds: [], since: nil, until: nil, products: [], all: true)))
            #expect(second.totalCorrections == 0)
            #expect(second.accountsProcessed == 10)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE run_id = \(second.runId)") == 0)
            #expect(try await world.entitlements() == after)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions") == 15)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE updated_at > first_seen_at") == ledgerUpdated)

            // The nightly run right after finds nothing due but the deferred and failed ones, once their time comes.
            let (third, _) = try await world.run(world.options())
            #expect(third.accountsProcessed == 0)
        }
    }

    @Test func aDryRunChangesNothing() async throws {
        try await RunWorld.with("dryrun") { world in
            try await Self.populate(world)
            let entitlements = try await world.entitlements()
            let receipts = try await world.connection.query("SELECT * FROM iap.app_receipts ORDER BY id").map(\.values)

            let (summary, ending) = try await world.run(world.options(dryRun: true))
            #expect(ending == .completed)
            #expect(summary.isDryRun)
            #expect(summary.totalCorrections == 6)
            #expect(try await world.entitlements() == entitlements)
            #expect(try await world.connection.query("SELECT * FROM iap.app_receipts ORDER BY id").map(\.values) == receipts)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'planned' AND run_id = \(summary.runId)") == 6)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE applied_at IS NOT NULL") == 0)

            // A real run afterwards still sees every account as due and ignores the dry run's plan.
            let (real, _) = try await world.run(world.options())
            #expect(real.accountsProcessed == 10)
            #expect(real.correctionsApplied == 6)
            #expect(real.correctionsTakenOver == 0)
        }
    }

    @Test func backfillSelections() async throws {
        try await RunWorld.with("backfill") { world in
            try await Self.populate(world)
            let (byAccount, _) = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: ["new", "refunded"], receiptIds: [], since: nil, until: nil, products: [], all: false)))
            #expect(byAccount.accountsProcessed == 2)
            let receiptId: Int64 = try await world.connection.query("SELECT min(id) AS id FROM iap.app_receipts WHERE account_id = 'buyer'")[0].decode("id")
            let (byReceipt, _) = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: [], receiptIds: [receiptId], since: nil, until: nil, products: [], all: false)))
            #expect(byReceipt.accountsProcessed == 1)
            #expect(byReceipt.receipts.values.reduce(0, +) == 2)  // every receipt of the selected account
            let (byProduct, _) = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: [], receiptIds: [], since: nil, until: nil, products: ["lifetime"], all: false)))
            #expect(byProduct.accountsProcessed == 2)  // orphan (entitlement) and buyer (ledger)
            let (none, _) = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: [], receiptIds: [], since: Date().addingTimeInterval(3600), until: nil, products: [], all: false)))
            #expect(none.accountsProcessed == 0)
        }
    }

    /// The ledger digest: a night whose answers give the same ledger rows sends none; a changed
    /// answer, a backfill or a notification writes them again.
    @Test func unchangedLedgerRowsAreNotSentAgainButChangedOnesAre() async throws {
        let now = Date()
        let blob = Data("ledger-digest-receipt".utf8).base64EncodedString()
        func answers(refunded: Bool) -> [String: Any] {
            let cancel: [String: Any] = refunded ? ["cancel": ["at_ms": Int64(now.timeIntervalSince1970 * 1000) - 86_400_000, "reason": 0]] : [:]
            let end = Int64(now.timeIntervalSince1970 * 1000) + 20 * 86_400_000
            return ["shared_secret": "world-secret", "receipts": [blob: ["generate": ["subscriptions": [
                ["product_id": "pro.monthly", "original_transaction_id": "900", "renewals": 3, "start_ms": end - 90 * 86_400_000,
                 "period_ms": 30 * 86_400_000].merging(cancel) { $1 },
            ]]]]]
        }
        let refundingApple = try SimulatorProcess(scenario: answers(refunded: true))
        defer { refundingApple.stop() }
        try await RunWorld.with("digest", now: now, scenario: answers(refunded: false)) { world in
            try await world.addReceipt("steady", blob)
            var nightly = world.options(selection: .due(staleAfter: .zero))
            nightly.pageSize = 100
            // A window of ten years: no refresh falls between this test's runs.
            nightly.ledgerRefresh = LedgerRefresh(interval: .seconds(3650 * 86_400))
            let ledgerRows = "SELECT count(*) FROM iap.transactions WHERE account_id = 'steady'"
            let digests = "SELECT count(*) FROM iap.app_receipts WHERE ledger_digest IS NOT NULL"

            _ = try await world.run(nightly)
            #expect(try await world.count(ledgerRows) == 3)
            #expect(try await world.count(digests) == 1)

            // The same answers: nothing is sent, so rows deleted behind the job's back stay deleted.
            try await world.connection.execute("DELETE FROM iap.transactions")
            _ = try await world.run(nightly)
            #expect(try await world.count(ledgerRows) == 0)

            // Apple's answer changed (a refund): the rows are written, the refund with them.
            let (refundNight, _) = try await world.run(nightly, apple: refundingApple)
            #expect(refundNight.corrections["revoke", default: 0] == 1)
            #expect(try await world.count(ledgerRows) == 3)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE cancellation_date IS NOT NULL") == 1)

            // A backfill writes every row whatever the digest says.
            try await world.connection.execute("DELETE FROM iap.transactions")
            _ = try await world.run(world.options(kind: .backfill, selection: .backfill(
                accounts: ["steady"], receiptIds: [], since: nil, until: nil, products: [], all: false)), apple: refundingApple)
            #expect(try await world.count(ledgerRows) == 3)

            // A notification wrote to the ledger: the next run writes the account's rows again.
            try await NotificationStore(connection: world.connection).requestReverification(accountId: "steady", now: now)
            #expect(try await world.count(digests) == 0)
            try await world.connection.execute("DELETE FROM iap.transactions")
            _ = try await world.run(nightly, apple: refundingApple)
            #expect(try await world.count(ledgerRows) == 3)
            #expect(try await world.count(digests) == 1)

            // Rows edited and deleted behind the job's back are put right by the next refresh
            // (a window of 1 ms: every run is in a new one), though Apple's answer is the same.
            try await world.connection.execute("DELETE FROM iap.transactions WHERE transaction_id = (SELECT min(transaction_id) FROM iap.transactions)")
            try await world.connection.execute("UPDATE iap.transactions SET cancellation_date = NULL, product_id = 'edited'")
            _ = try await world.run(nightly, apple: refundingApple)
            #expect(try await world.count(ledgerRows) == 2)
            var refreshing = nightly
            refreshing.ledgerRefresh = LedgerRefresh(interval: .milliseconds(1))
            _ = try await world.run(refreshing, apple: refundingApple)
            #expect(try await world.count(ledgerRows) == 3)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE product_id = 'pro.monthly'") == 3)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE cancellation_date IS NOT NULL") == 1)

            // A digest of another version (the ledger's meaning changed) rewrites the rows once.
            try await world.connection.execute("DELETE FROM iap.transactions")
            try await world.connection.execute("UPDATE iap.app_receipts SET ledger_digest = ledger_digest # 1")
            _ = try await world.run(nightly, apple: refundingApple)
            #expect(try await world.count(ledgerRows) == 3)
            try await world.connection.execute("DELETE FROM iap.transactions")
            _ = try await world.run(nightly, apple: refundingApple)
            #expect(try await world.count(ledgerRows) == 0)
        }
    }

    @Test func aFresherReceiptFromAppleReplacesTheStoredOneButAPlaceholderDoesNot() async throws {
        try await RunWorld.with("fresher") { world in
            let fresh = Data("a fresher receipt".utf8).base64EncodedString()
            try await world.addReceipt("fresh", spec: ["generate": ["latest_receipt": fresh, "purchases": [["product_id": "lifetime", "transaction_id": "1"]]]])
            try await world.addReceipt("redacted", spec: ["generate": ["latest_receipt": "[[REDACTED]]", "purchases": [["product_id": "lifetime", "transaction_id": "2"]]]])
            let (summary, _) = try await world.run(world.options())
            #expect(summary.latestReceiptsStored == 1)
            #expect(summary.latestReceiptsIgnored == 1)
            let rows = try await world.connection.query("SELECT account_id, latest_receipt FROM iap.app_receipts ORDER BY account_id")
            #expect(try rows[0].decode("latest_receipt", as: String.self) == fresh)
            #expect(try rows[1].decode("latest_receipt", as: String.self).hasPrefix(Data("simulated-receipt:".utf8).base64EncodedString().prefix(20)))
        }
    }

    @Test func tooManyRevokesAbortBeforeApplyingAnything() async throws {
        try await RunWorld.with("ratio") { world in
            try await world.populateRefundWave()
            let before = try await world.entitlements()
            var options = world.options()
            options.pageSize = 50
            options.batchSize = 25
            let (summary, ending) = try await world.run(options)
            #expect(ending == .aborted)
            #expect(summary.status == .aborted)
            #expect(summary.error?.contains("15 of 110") == true)
            #expect(try await world.entitlements() == before)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'planned'") == 110)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE applied_at IS NOT NULL") == 0)

            // The next nightly takes over the plan, verifies its accounts again (only they are due)
            // and aborts again: Apple still says the same (docs/guarantees.md, "Safety limit").
            let (again, againEnding) = try await world.run(options)
            #expect(againEnding == .aborted)
            #expect(again.accountsProcessed == 110)
            #expect(again.error?.contains("15 of 110") == true)
            #expect(again.correctionsTakenOver == 110)
            #expect(try await world.entitlements() == before)

            // Once an operator has reviewed it and raised the limit, the next run applies its fresh plan.
            options.maximumRevokeRatio = 0.2
            let (approved, approvedEnding) = try await world.run(options)
            #expect(approvedEnding == .completed)
            #expect(approved.correctionsTakenOver == 110)
            #expect(approved.correctionsApplied == 110)
            let after = try await world.entitlements()
            #expect(after.values.filter { $0.state == .refunded }.count == 15)
            #expect(after.values.filter { $0.state == .active && $0.expiresAt == world.expiry(endDays: 10) }.count == 95)
        }
    }
}

/// The local decode informs the run: it records what the receipt says.
@Suite struct LocalDecodeInRunTests {
    @Test func theLocalDecodeIsRecordedOnTheReceiptRow() async throws {
        let blob = String(decoding: try Fixtures.bytes("receipts/tpinappreceipt-receipt-production.b64"), as: UTF8.self)
            .filter { !$0.isWhitespace }
        let scenario: [String: Any] = ["receipts": [blob: ["generate": [
            "bundle_id": "org.getpure.pure-iphone", "purchases": [["product_id": "lifetime", "transaction_id": "42"]]]]]]
        try await RunWorld.with("localdecode", scenario: scenario) { world in
            try await world.catalog(["lifetime": .nonConsumable])
            try await world.addReceipt("pure", blob)
            var options = world.options()
            options.bundleIds = ["org.getpure.pure-iphone"]
            let (summary, _) = try await world.run(options)
            #expect(summary.bundleMismatches.isEmpty)
            #expect(summary.receiptsNotDecodedLocally == 0)
            let row = try await world.connection.query("""
                SELECT receipt_bundle_id, array_to_string(receipt_original_transaction_ids, ',') AS originals, last_outcome
                FROM iap.app_receipts
                """)
            #expect(try row[0].decode("receipt_bundle_id", as: String?.self) == "org.getpure.pure-iphone")
            #expect(try row[0].decode("originals", as: String?.self) == "340001196262039")
            #expect(try row[0].decode("last_outcome", as: String?.self) == "verified")
            // Apple's answer decides the entitlement, not the local decode.
            #expect(try await world.entitlements().keys.sorted() == ["pure/lifetime"])
        }
    }

    /// A run stores the decode with the digest of the blob it came from, and the next run reads it
    /// from there while the blob is the same; a blob written anew is decoded anew.
    @Test func aStoredDecodeIsReadAgainOnlyForTheSameBlob() async throws {
        let blob = String(decoding: try Fixtures.bytes("receipts/tpinappreceipt-receipt-production.b64"), as: UTF8.self)
            .filter { !$0.isWhitespace }
        let answer: [String: Any] = ["generate": [
            "bundle_id": "org.getpure.pure-iphone", "purchases": [["product_id": "lifetime", "transaction_id": "42"]]]]
        // The same receipt, as the app server might store it again: wrapped at 76 characters.
        let wrapped = stride(from: 0, to: blob.count, by: 76).map { start in
            String(blob.dropFirst(start).prefix(76))
        }.joined(separator: "\n")
        try await RunWorld.with("decodedigest", scenario: ["receipts": [blob: answer, wrapped: answer]]) { world in
            try await world.addReceipt("pure", blob)
            var options = world.options(selection: .due(staleAfter: .zero))
            options.bundleIds = ["org.getpure.pure-iphone"]
            _ = try await world.run(options)
            let digest = try await world.connection.query("SELECT receipt_decoded_digest AS d FROM iap.app_receipts")[0]
                .decode("d", as: Int64?.self)
            #expect(digest == ReceiptIdentifiers.digest(ofBlob: blob))

            // The stored decode is what the next run reads: a bundle id written over it by hand
            // (the blob untouched) is what the bundle check sees.
            try await world.connection.execute("UPDATE iap.app_receipts SET receipt_bundle_id = 'com.example.elsewhere'")
            let (reread, _) = try await world.run(options)
            #expect(reread.bundleMismatches.count == 1, "\(reread.bundleMismatches)")

            // A blob written anew is decoded anew, and the decode describes it.
            // (The foreign bundle deferred the receipt: due again now, as for a new purchase.)
            try await world.connection.execute("UPDATE iap.app_receipts SET latest_receipt = \(wrapped), next_attempt_at = NULL")
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome <> 'verified'") == 1)
            let (decoded, _) = try await world.run(options)
            #expect(decoded.accountsProcessed == 1)
            #expect(decoded.bundleMismatches.isEmpty, "\(decoded.bundleMismatches)")
            let row = try await world.connection.query("""
                SELECT receipt_bundle_id, receipt_decoded_digest, array_to_string(receipt_original_transaction_ids, ',') AS originals
                FROM iap.app_receipts
                """)[0]
            #expect(try row.decode("receipt_bundle_id", as: String?.self) == "org.getpure.pure-iphone")
            #expect(try row.decode("originals", as: String?.self) == "340001196262039")
            #expect(try row.decode("receipt_decoded_digest", as: Int64?.self) == ReceiptIdentifiers.digest(ofBlob: wrapped))
        }
    }
}

/// Every output writes a timestamp one way: ISO 8601, UTC, milliseconds, `Z` (issue 16; the
/// expiry columns of corrections.csv used to have microseconds beside `applied_at`'s milliseconds).
@Suite struct TimestampOutputTests {
    static func isPinned(_ text: String) -> Bool {
        text.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/) != nil
    }

    @Test func reportsAndLogsWriteOneFormat() async throws {
        try await RunWorld.with("timestamps") { world in
            try await RunWorld.populate(world, count: 4)
            let environment = RunWorld.environment(world)
            let report = world.reportRoot.appending(path: "pinned")
            let result = try await CLIProcess.run(["run", "--report-dir", report.path], environment: environment)
            #expect(result.status == 0, "\(result.stderr)")
            // Logs: the first field of every line.
            for line in result.stderr.split(separator: "\n") {
                #expect(Self.isPinned(String(line.split(separator: " ")[0])), "\(line)")
            }
            // corrections.csv: applied_at, before_expires_at, after_expires_at.
            let rows = try String(contentsOf: report.appending(path: "corrections.csv"), encoding: .utf8).split(separator: "\r\n").dropFirst()
            #expect(rows.count == 4)
            for row in rows {
                let cells = row.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                for cell in [cells[6], cells[10]] + (cells[9].isEmpty ? [] : [cells[9]]) {
                    #expect(Self.isPinned(cell), "\(cell) in \(row)")
                }
            }
            // summary.json: started_at and finished_at.
            let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: report.appending(path: "summary.json"))) as? [String: Any]
            for key in ["startedAt", "finishedAt"] {
                #expect((summary?[key] as? String).map(Self.isPinned) == true, "\(key): \(summary?[key] ?? "none")")
            }
        }
    }
}
