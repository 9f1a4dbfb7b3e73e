import Foundation
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// Issue 35, adoption: every SQL block of docs/adoption.md, run as written (with psql) against a
/// real PostgreSQL, then real runs over what they built.
@Suite struct AdoptionTests {
    /// The page's tested blocks, in order: `<!-- test: NAME -->` then a fenced block.
    static func snippets() throws -> [String: String] {
        let page = try String(contentsOf: TestPaths.repositoryRoot.appending(path: "docs/adoption.md"), encoding: .utf8)
        var snippets: [String: String] = [:]
        for match in page.matches(of: /<!-- test: ([a-z-]+) -->\n```sql\n((?:.|\n)*?)```/) {
            snippets[String(match.output.1)] = String(match.output.2)
        }
        return snippets
    }

    static let names = ["example-tables", "one-receipt-per-account", "upsert-receipt", "mirror-users", "follow-entitlements",
                        "subscriptions-view", "consent-trigger", "fill-catalog", "import-entitlements", "import-csv", "import-users",
                        "grant-runtime-role", "undo-run"]

    /// Runs `sql` with psql as an operator would (stopping at the first error), in `directory`.
    static func psql(_ world: RunWorld, _ sql: String, variables: [String: String] = [:], in directory: URL? = nil) throws {
        let bin = try #require(ProcessInfo.processInfo.environment["RR_PG_BIN"], "RR_PG_BIN: run the tests with scripts/test")
        let directory = directory ?? world.reportRoot
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appending(path: "snippet-\(UUID().uuidString).sql")
        try sql.write(to: file, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(filePath: bin).appending(path: "psql")
        process.arguments = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", world.database.connectionString, "-f", file.path]
            + variables.sorted { $0.key < $1.key }.flatMap { ["-v", "\($0.key)=\($0.value)"] }
        process.currentDirectoryURL = directory
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "psql failed on:\n\(sql)\n\(stderr)")
    }

    static func receipt(_ world: RunWorld, original: Int, endDays: Double) -> String {
        syntheticReceipt(["generate": ["subscriptions": [world.subscription(original: "\(original)", renewals: 2, endDays: endDays)]]])
    }

    /// (user, product, active, expires) of `table`, sorted.
    static func rows(_ world: RunWorld, _ table: String, user: String = "user_id", active: String = "active") async throws -> [String] {
        try await world.connection.query("""
            SELECT \(unescaped: user) || '/' || product_id || '/' || \(unescaped: active) || '/' || COALESCE(expires_at::text, '-') AS r
            FROM \(unescaped: table) ORDER BY 1
            """).map { try $0.decode("r") }
    }

    @Test func theMirrorTheUpsertTheFollowingTriggerTheViewAndTheUndoWorkAsDocumented() async throws {
        let snippets = try Self.snippets()
        #expect(Set(snippets.keys) == Set(Self.names))
        try await RunWorld.with("adoption") { world in
            for name in ["example-tables", "one-receipt-per-account", "mirror-users", "follow-entitlements", "subscriptions-view"] {
                try Self.psql(world, try #require(snippets[name]))
            }
            // Section 2: the app writes only its users; the trigger mirrors each change.
            let active = Self.receipt(world, original: 501, endDays: 20)
            try await world.connection.execute("""
                INSERT INTO public.users VALUES (1, \(active)), (2, 'an old receipt'), (3, \(Self.receipt(world, original: 503, endDays: -30))),
                    (4, \(Self.receipt(world, original: 504, endDays: 20))), (5, NULL)
                """)
            try await world.connection.execute("UPDATE public.users SET latest_receipt = \(Self.receipt(world, original: 502, endDays: 10)) WHERE id = 2")
            try await world.connection.execute("DELETE FROM public.users WHERE id = 4")
            #expect(try await world.connection.query("SELECT account_id FROM iap.app_receipts ORDER BY 1").map { try $0.decode("account_id", as: String.self) }
                    == ["1", "2", "3"])
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE account_id = '2' AND latest_receipt = 'an old receipt'") == 0)

            // Section 1: the app's own upsert, bound as a driver binds it; the same blob again changes nothing.
            let upsert = try #require(snippets["upsert-receipt"])
            func upsertReceipt(_ blob: String) throws {
                try Self.psql(world, "PREPARE upsert(text, text, text) AS \(upsert);\nEXECUTE upsert('direct-7', 'com.example.app', '\(blob)');")
            }
            try upsertReceipt("an early receipt")
            try upsertReceipt(Self.receipt(world, original: 507, endDays: 15))
            try await world.connection.execute("UPDATE iap.app_receipts SET reverify_requested_at = NULL WHERE account_id = 'direct-7'")
            try upsertReceipt(Self.receipt(world, original: 507, endDays: 15))
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE account_id = 'direct-7'") == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE account_id = 'direct-7' AND reverify_requested_at IS NULL") == 1,
                    "an unchanged receipt must not make the account due again")

            // Account 3 was granted by the app long ago; Apple says it lapsed: the run revokes it.
            try await world.store(Entitlement(accountId: "3", productId: "pro.monthly", originalTransactionId: "503", state: .active,
                                              expiresAt: world.expiry(endDays: 300)))
            let stored = try await Self.rows(world, "iap.entitlements", user: "account_id", active: "entitled")
            #expect(try await Self.rows(world, "public.subscriptions") == stored)

            let run = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.appending(path: "night").path],
                                               environment: RunWorld.environment(world))
            #expect(run.status == 0, "\(run.stderr)")
            // Section 3: the trigger and the view both follow the job's writes.
            let entitlements = try await Self.rows(world, "iap.entitlements", user: "account_id", active: "entitled")
            #expect(entitlements.map { $0.split(separator: "/").prefix(3).joined(separator: "/") }
                    == ["1/pro.monthly/true", "2/pro.monthly/true", "3/pro.monthly/false", "direct-7/pro.monthly/true"])
            #expect(try await Self.rows(world, "public.subscriptions") == entitlements)
            #expect(try await Self.rows(world, "public.subscriptions_now") == entitlements)

            // The undo: after the run, the app changed account 2's row itself; the undo leaves it,
            // removes the rows the run created, and puts account 3's row back.
            let runId = try await world.count("SELECT max(id) FROM iap.reconciliation_runs")
            try await world.connection.execute("UPDATE iap.entitlements SET auto_renew = false, updated_at = now() WHERE account_id = '2'")
            try Self.psql(world, try #require(snippets["undo-run"]), variables: ["run": "\(runId)"])
            let undone = try await Self.rows(world, "iap.entitlements", user: "account_id", active: "entitled")
            #expect(undone.map { $0.split(separator: "/").prefix(3).joined(separator: "/") } == ["2/pro.monthly/true", "3/pro.monthly/true"])
            #expect(undone.last == stored.first, "account 3 is back as it was before the run")
            #expect(try await Self.rows(world, "public.subscriptions") == undone)
        }
    }

    /// Section 4: the consent trigger keeps `iap.consumption_consent` the app's own setting: given,
    /// changed, withdrawn, deleted.
    @Test func theConsentTriggerMirrorsTheAppsSetting() async throws {
        try await RunWorld.with("adoption-consent") { world in
            try Self.psql(world, try #require(try Self.snippets()["consent-trigger"]))
            try await world.connection.execute("INSERT INTO public.privacy_settings VALUES (1, true, 'DECLINE'), (2, false, NULL), (3, true, NULL)")
            try await world.connection.execute("UPDATE public.privacy_settings SET share_usage_with_apple = false WHERE user_id = 3")
            try await world.connection.execute("DELETE FROM public.privacy_settings WHERE user_id = 2")
            let rows = try await world.connection.query(
                "SELECT account_id || '/' || consented || '/' || COALESCE(refund_preference, '-') AS r FROM iap.consumption_consent ORDER BY 1"
            ).map { try $0.decode("r", as: String.self) }
            #expect(rows == ["1/true/DECLINE", "3/false/-"])
        }
    }

    @Test func theFirstImportThenADryRunThenTheFirstRealRun() async throws {
        let snippets = try Self.snippets()
        try await RunWorld.with("adoption-import") { world in
            for name in ["example-tables", "one-receipt-per-account", "fill-catalog"] { try Self.psql(world, try #require(snippets[name])) }
            // The app's own decisions, imported first: csv-0 and csv-1 have access, csv-2 had none.
            try await world.connection.execute("""
                INSERT INTO public.subscriptions VALUES ('csv-0', 'pro.monthly', true, now() + interval '10 days'),
                    ('csv-1', 'pro.monthly', true, now() + interval '25 days'), ('10', 'pro.monthly', true, now() + interval '25 days')
                """)
            try Self.psql(world, try #require(snippets["import-entitlements"]))
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements WHERE entitled AND state = 'active'") == 3)
            let directory = world.reportRoot.appending(path: "import")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let csv = "account_id,bundle_id,latest_receipt\n" + (0..<3).map { index in
                "csv-\(index),com.example.app,\(Self.receipt(world, original: 600 + index, endDays: Double(10 - 15 * index)))"
            }.joined(separator: "\n") + "\n"
            try csv.write(to: directory.appending(path: "receipts.csv"), atomically: true, encoding: .utf8)
            try Self.psql(world, try #require(snippets["import-csv"]), in: directory)
            // The users' import skips an account the CSV loaded already.
            try await world.connection.execute("""
                INSERT INTO public.users VALUES (10, \(Self.receipt(world, original: 610, endDays: 25))), (11, NULL)
                """)
            try await world.connection.execute("INSERT INTO iap.app_receipts (account_id, latest_receipt) VALUES ('10', 'kept')")
            try Self.psql(world, try #require(snippets["import-users"]))
            #expect(try await world.connection.query("SELECT account_id || '=' || left(latest_receipt, 4) AS r FROM iap.app_receipts ORDER BY 1")
                .map { try $0.decode("r", as: String.self) }.map { $0.prefix { $0 != "=" } } == ["10", "csv-0", "csv-1", "csv-2"])
            try await world.connection.execute("UPDATE iap.app_receipts SET latest_receipt = \(Self.receipt(world, original: 610, endDays: 25)) WHERE account_id = '10'")

            let environment = RunWorld.environment(world)
            let dryReport = world.reportRoot.appending(path: "dry")
            let dry = try await CLIProcess.run(["run", "--dry-run", "--report-dir", dryReport.path], environment: environment)
            #expect(dry.status == 0, "\(dry.stderr)")
            let summary = try String(contentsOf: dryReport.appending(path: "summary.md"), encoding: .utf8)
            #expect(summary.contains("dry run"), "\(summary.prefix(600))")
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 3)
            // Measured against what the customers had: csv-1 loses access Apple says lapsed 5 days
            // ago, a revoke the limit counts; csv-2, which the app never granted, loses nothing (its
            // first row granting nothing is an update). Nobody is granted: the app gave access already.
            let planned = try await world.connection.query("""
                SELECT account_id || '/' || kind AS r FROM iap.corrections WHERE status = 'planned' AND kind IN ('grant', 'revoke') ORDER BY 1
                """).map { try $0.decode("r", as: String.self) }
            #expect(planned == ["csv-1/revoke"])

            let real = try await CLIProcess.run(["run", "--max-revoke-ratio", "0.05", "--report-dir", world.reportRoot.appending(path: "first").path],
                                                environment: environment)
            #expect(real.status == 0, "\(real.stderr)")
            #expect(try await world.connection.query("SELECT account_id FROM iap.entitlements WHERE entitled ORDER BY 1")
                .map { try $0.decode("account_id", as: String.self) } == ["10", "csv-0"])
        }
    }

    /// "A role of its own": the job runs as a role given only what the page grants, its trigger
    /// of section 3 included; without the page's last line that trigger fails the batch, as it says.
    @Test func theJobRunsAsARoleGivenWhatThePageGrants() async throws {
        let snippets = try Self.snippets()
        try await RunWorld.with("adoption-role") { world in
            try await world.connection.execute("""
                DO $$ BEGIN CREATE ROLE receipt_reconciler_job LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$
                """)
            for name in ["example-tables", "follow-entitlements", "grant-runtime-role"] { try Self.psql(world, try #require(snippets[name])) }
            try await RunWorld.populate(world, count: 4)
            var environment = RunWorld.environment(world)
            environment["DATABASE_URL"] = world.database.connectionString.replacingOccurrences(of: "user=postgres", with: "user=receipt_reconciler_job")
            #expect(environment["DATABASE_URL"]?.contains("user=receipt_reconciler_job") == true)

            try await world.connection.execute("REVOKE ALL ON public.subscriptions FROM receipt_reconciler_job")
            let refused = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.appending(path: "refused").path], environment: environment)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("permission denied for table subscriptions"), "\(refused.stderr.suffix(2000))")

            try await world.connection.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON public.subscriptions TO receipt_reconciler_job")
            let run = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.appending(path: "night").path], environment: environment)
            #expect(run.status == 0, "\(run.stderr.suffix(4000))")
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 4)
            #expect(try await world.count("SELECT count(*) FROM public.subscriptions") == 4)
        }
    }
}
