import Foundation
import Testing
import TestSupport
@testable import WorldSupport

/// A dry run plans and reports, and is never taken for a night: not by `explain`, not by the
/// metrics the alerts read.
@Suite struct DryRunTests {
    @Test func aDryRunsPlanIsMarkedInExplainAsNeverApplied() async throws {
        try await RunWorld.with("dry-explain") { world in
            try await RunWorld.populate(world, count: 3)
            let dry = try await CLIProcess.run(["run", "--dry-run", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(dry.status == 0, "\(dry.stderr)")
            let text = try await CLIProcess.run(["explain", "acct-00000"], environment: RunWorld.environment(world))
            #expect(text.status == 0, "\(text.stderr)")
            #expect(text.stdout.contains("planned (dry run, never applied)"), "\(text.stdout)")
            let json = try await CLIProcess.run(["explain", "acct-00000", "--json"], environment: RunWorld.environment(world))
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            let corrections = try #require(document["corrections"] as? [[String: Any]])
            #expect(!corrections.isEmpty && corrections.allSatisfy { $0["dry_run"] as? Bool == true && $0["status"] as? String == "planned" })
        }
    }

    @Test func aDryRunLeavesTheLastRealRunsMetricsAsTheyWere() async throws {
        try await RunWorld.with("dry-metrics") { world in
            try await RunWorld.populate(world, count: 3)
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let metrics = world.reportRoot.appending(path: "metrics.prom")
            func run(_ extra: [String]) async throws {
                let result = try await CLIProcess.run(
                    ["run", "--metrics-file", metrics.path, "--report-dir", world.reportRoot.appending(path: UUID().uuidString).path] + extra,
                    environment: RunWorld.environment(world))
                #expect(result.status == 0, "\(result.stderr)")
            }
            try await run([])
            let real = try String(contentsOf: metrics, encoding: .utf8)
            #expect(real.contains("receipt_reconciler_last_success_timestamp_seconds{kind=\"nightly\"}"))
            try await run(["--dry-run", "--stale-after", "0s"])
            let after = try String(contentsOf: metrics, encoding: .utf8).split(separator: "\n").map(String.init)
            // Every line of the real run is still there, as it was; the dry run adds its own series.
            #expect(Array(after.prefix(real.split(separator: "\n").count)) == real.split(separator: "\n").map(String.init))
            #expect(after.contains { $0.hasPrefix("receipt_reconciler_last_dry_run_timestamp_seconds{kind=\"nightly\",status=\"completed\"} ") })
            #expect(after.count == real.split(separator: "\n").count + 3)
        }
    }
}
