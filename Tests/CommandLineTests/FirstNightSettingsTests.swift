import Foundation
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// What a first night needs is asked for before anything connects, all of it at once.
@Suite struct FirstNightSettingsTests {
    /// A key configured and nothing else of the App Store Server API: one error names every
    /// missing setting, the app's Apple id among them (without it Apple's production signed data
    /// is refused by a run that exits 0).
    @Test func theServerAPINamesEveryMissingSettingAtOnce() async throws {
        let key = FileManager.default.temporaryDirectory.appending(path: "rr-first-night-\(UUID().uuidString).p8")
        try Fixtures.privateKey(at: key)
        defer { try? FileManager.default.removeItem(at: key) }
        let environment = ["DATABASE_URL": "host=127.0.0.1 port=1 dbname=nothing", "APPLE_SHARED_SECRET": "secret",
                           "APPSTORE_PRIVATE_KEY_FILE": key.path, "APPSTORE_BUNDLE_ID": "com.example.app"]
        for command in [["run"], ["answer-consumption-requests"]] {
            let result = try await CLIProcess.run(command, environment: environment)
            #expect(result.status == 2, "\(command): \(result.stderr)")
            let lines = result.stderr.split(separator: "\n").filter { $0.contains("APPSTORE_ISSUER_ID") }
            #expect(lines.count == 1, "\(command): \(result.stderr)")
            for setting in ["APPSTORE_ISSUER_ID", "APPSTORE_KEY_ID", "APPSTORE_APP_APPLE_ID"] {
                #expect(lines.first?.contains(setting) == true, "\(command) did not name \(setting): \(result.stderr)")
            }
            #expect(!result.stderr.contains("could not connect"), "the settings are checked before anything connects")
        }
    }

    /// A database never migrated: every command says to run `migrate` first, exit 2 (no retry mends it).
    @Test func aDatabaseNeverMigratedIsToldToRunMigrateFirst() async throws {
        let database = try await TestDatabase.create("never-migrated")
        defer { Task { try? await database.drop() } }
        let environment = ["DATABASE_URL": database.connectionString, "APPLE_SHARED_SECRET": "secret"]
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-never-migrated-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for command in [["run", "--report-dir", directory.path], ["explain", "acct-1"],
                        ["export-finance", "--from", "2026-01-01", "--to", "2026-02-01", "--output", directory.appending(path: "f.csv").path]] {
            let result = try await CLIProcess.run(command, environment: environment)
            #expect(result.status == 2, "\(command): \(result.stderr)")
            #expect(result.stderr.contains("run 'receipt-reconciler migrate' first"), "\(command): \(result.stderr)")
        }
    }

    /// An image rolled back past a migration: its `migrate` (the pods' init container) exits 2,
    /// which fails the Job at once, and says that migrations only go forward (docs/operating.md,
    /// "The manifests").
    @Test func aSchemaNewerThanTheBinaryIsRefusedWithExitTwo() async throws {
        let database = try await TestDatabase.create("newer-schema")
        defer { Task { try? await database.drop() } }
        let environment = ["DATABASE_URL": database.connectionString]
        #expect(try await CLIProcess.run(["migrate"], environment: environment).status == 0)
        let connection = try await database.connect()
        try await connection.execute("INSERT INTO iap.schema_migrations (version, checksum) VALUES ('9999_from_a_newer_build', 'x')")
        await connection.close()
        let result = try await CLIProcess.run(["migrate"], environment: environment)
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("9999_from_a_newer_build") && result.stderr.contains("Migrations only go forward"), "\(result.stderr)")
    }

    /// docs/configuration.md, "Every command": `--log-level` and `--log-format` are every command's
    /// (the simulator, which prints only where it listens, aside).
    @Test func everyCommandTakesTheLoggingOptions() async throws {
        for command in CommandLineCoverageTests.userCommands + [["seed-demo"]] {
            let options = try await CommandLineCoverageTests.options(of: command)
            #expect(options.isSuperset(of: ["--log-level", "--log-format"]), "\(command.joined(separator: " ")): \(options.sorted())")
        }
    }

    /// Nothing set at all: one error names the database and the shared secret together.
    @Test func aRunWithNothingSetNamesEverySettingItNeeds() async throws {
        let result = try await CLIProcess.run(["run"], environment: [:])
        #expect(result.status == 2, "\(result.stderr)")
        let lines = result.stderr.split(separator: "\n").filter { $0.contains("configuration.invalid") }
        #expect(lines.count == 1 && lines[0].contains("DATABASE_URL") && lines[0].contains("APPLE_SHARED_SECRET"), "\(result.stderr)")
    }

    /// Before an import, a first row that grants nothing counts as a revoke (the app may have given
    /// access from its own table) for an account stored before the first night; a newcomer stored
    /// after it began is the job's from its start; once the import is recorded, a missing row means
    /// no access, and such a row is an update.
    @Test func aFirstNightWithNothingImportedCountsLostAccessAndAnImportedOneDoesNot() async throws {
        func night(_ world: RunWorld, _ name: String) async throws -> (revokes: Int, log: String) {
            let result = try await CLIProcess.run(["run", "--stale-after", "0s", "--report-dir", world.reportRoot.appending(path: name).path],
                                                  environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr.suffix(1000))")
            let runId = try await world.count("SELECT max(id) FROM iap.reconciliation_runs")
            return (try await world.count("SELECT count(*) FROM iap.corrections WHERE kind = 'revoke' AND run_id = \(runId)"), result.stderr)
        }
        try await RunWorld.with("first-night") { world in
            try await RunWorld.populate(world, count: 20)  // 5 lapsed days ago, nothing stored
            let first = try await night(world, "first")
            #expect(first.revokes == 5 && first.log.contains("run.first_night"), "\(first.revokes)")
            // The next night, nothing of the app's imported: a new account, stored after the first night began,
            // with a lapsed subscription takes nothing away; an app server's own row changes nothing of that.
            try await world.addReceipt("newcomer", spec: ["generate": ["subscriptions": [world.subscription(original: "990", endDays: -3)]]])
            try await world.store(Entitlement(accountId: "app-written", productId: "pro.monthly", originalTransactionId: "", state: .active,
                                              expiresAt: world.expiry(endDays: 30)), imported: false)
            let second = try await night(world, "second")
            #expect(second.revokes == 0 && second.log.contains("run.first_night"), "\(second.revokes)")
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE account_id = 'newcomer' AND kind = 'update'") == 1)
        }
        try await RunWorld.with("first-night-imported") { world in
            try await RunWorld.populate(world, count: 20)
            try await world.store(Entitlement(accountId: "someone-else", productId: "pro.monthly", originalTransactionId: "", state: .active,
                                              expiresAt: world.expiry(endDays: 30)))
            let imported = try await night(world, "first")
            #expect(imported.revokes == 0 && !imported.log.contains("run.first_night"), "\(imported.revokes)")
            // The job then corrects the imported row (its original id filled in, its state): it is still the app's import.
            try await world.addReceipt("someone-else", spec: ["generate": ["subscriptions": [world.subscription(original: "991", endDays: 20)]]])
            try await world.addReceipt("newcomer", spec: ["generate": ["subscriptions": [world.subscription(original: "992", endDays: -3)]]])
            let later = try await night(world, "later")
            #expect(later.revokes == 0 && !later.log.contains("run.first_night"), "\(later.revokes)")
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE account_id = 'someone-else' AND status = 'applied'") == 1)
            // The night after: every row now has an applied correction, yet someone-else's was the app's first.
            try await world.addReceipt("newcomer-2", spec: ["generate": ["subscriptions": [world.subscription(original: "993", endDays: -2)]]])
            let after = try await night(world, "after")
            #expect(after.revokes == 0 && !after.log.contains("run.first_night"), "\(after.revokes)")
        }
    }
}
