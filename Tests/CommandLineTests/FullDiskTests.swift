import Foundation
import Postgres
import TestSupport
import Testing
@testable import WorldSupport

/// CI runs as root or as a user with passwordless sudo (`.ci/run` sets RR_REQUIRE_ROOT_TESTS=1
/// then): a root-only suite that was skipped there fails this test, so a broken mount cannot hide
/// the disk-full tests.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["RR_REQUIRE_ROOT_TESTS"] == "1", "root was not promised (RR_REQUIRE_ROOT_TESTS)"))
struct RootOnlyTestsRanTests {
    @Test func theRootOnlySuitesRanWhereRootWasPromised() {
        #expect(SmallDisk.privilege != nil, "RR_REQUIRE_ROOT_TESTS=1 but the tests run neither as root nor with passwordless sudo")
        #expect(SmallDisk.isAvailable, "root or sudo was promised, yet a tmpfs could not be mounted: FullDiskTests were skipped")
    }
}

/// The report directory on a disk that fills up: the error names the file and the cause, no
/// half-written file is left, and nothing the database holds is lost.
@Suite(.enabled(if: SmallDisk.isAvailable, "needs root or passwordless sudo to mount a small tmpfs"))
struct FullDiskTests {
    @Test func aDiskFullBeforeTheRunStopsItBeforeAnyChange() async throws {
        try await RunWorld.with("diskfull") { world in
            try await RunWorld.populate(world, count: 20)
            let disk = try SmallDisk(kilobytes: 16)
            defer { disk.unmount() }
            disk.fill()
            let reports = disk.directory.appending(path: "run").path
            let refused = try await CLIProcess.run(["run", "--report-dir", reports], environment: RunWorld.environment(world))
            #expect(refused.status == 1)
            #expect(refused.stderr.contains("failures.csv") && refused.stderr.contains("No space left on device"), "\(refused.stderr)")
            #expect(disk.files() == ["filler", "run"])
            let run = try await world.connection.query("SELECT status, error FROM iap.reconciliation_runs")
            #expect(try run[0].decode("status", as: String.self) == "failed")
            #expect(try run[0].decode("error", as: String.self).contains("No space left on device"))
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 0)
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_verified_at IS NOT NULL") == 0)

            disk.free()
            let rerun = try await CLIProcess.run(["run", "--report-dir", reports], environment: RunWorld.environment(world))
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(disk.files() == ["run", "run/corrections.csv", "run/failures.csv", "run/summary.json", "run/summary.md"])
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 20)
        }
    }

    @Test func aDiskThatFillsWhileReportingKeepsTheRunsWorkAndSaysHowToFinish() async throws {
        try await RunWorld.with("diskfills") { world in
            // 400 corrections make a corrections.csv several times the disk.
            try await RunWorld.populate(world, count: 400)
            let disk = try SmallDisk(kilobytes: 24)
            defer { disk.unmount() }
            let reports = disk.directory.appending(path: "run").path
            // Nothing stored: each lapsed account is a revoke the limit counts; the limit is not this test's subject.
            let result = try await CLIProcess.run(["run", "--max-revoke-ratio", "1", "--report-dir", reports], environment: RunWorld.environment(world))
            #expect(result.status == 1)
            #expect(result.stderr.contains("\(reports)/corrections.csv: No space left on device"), "\(result.stderr)")
            #expect(result.stderr.contains("its work is committed"))
            #expect(result.stderr.contains("receipt-reconciler report 1"))
            // Whole files or none: no partial file is left taking the space.
            #expect(disk.files() == ["run", "run/failures.csv"])

            let run = try await world.connection.query("SELECT status, error FROM iap.reconciliation_runs")
            #expect(try run[0].decode("status", as: String.self) == "completed")
            #expect(try run[0].decode("error", as: String.self).contains("corrections.csv"))
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'applied'") == 400)
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 400)

            // The report can be written from the database elsewhere, whole.
            let elsewhere = world.reportRoot.appending(path: "corrections-1.csv")
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let rewritten = try await CLIProcess.run(["report", "1", "--format", "csv", "--output", elsewhere.path],
                                                     environment: RunWorld.environment(world))
            #expect(rewritten.status == 0, "\(rewritten.stderr)")
            #expect(try String(contentsOf: elsewhere, encoding: .utf8).split(separator: "\r\n").count == 401)

            // And onto the full disk it fails the same clear way, leaving nothing behind.
            let onFull = try await CLIProcess.run(["report", "1", "--format", "csv", "--output", "\(reports)/corrections.csv"],
                                                  environment: RunWorld.environment(world))
            #expect(onFull.status == 1)
            #expect(onFull.stderr.contains("\(reports)/corrections.csv: No space left on device"), "\(onFull.stderr)")
            #expect(disk.files() == ["run", "run/failures.csv"])
        }
    }
}
