import Foundation
import Testing
import TestSupport
@testable import WorldSupport

/// `runs` lists the recent runs with their status, and `report latest` reads the latest run's
/// report from the database, wherever its files went (a pod's emptyDir; docs/configuration.md, "`runs`").
@Suite struct RunsCommandTests {
    @Test func runsListsTheRecentRunsNewestFirstAndReportLatestReadsTheLastThatEnded() async throws {
        try await RunWorld.with("runs-cli") { world in
            let environment = RunWorld.environment(world)
            let none = try await CLIProcess.run(["report", "latest"], environment: environment)
            #expect(none.status == 2 && none.stderr.contains("no run has ended yet"), "\(none.stderr)")
            let empty = try await CLIProcess.run(["runs"], environment: environment)
            #expect(empty.status == 0 && empty.stdout == "ID\tKIND\tSTATUS\tDRY_RUN\tSHARD\tSTARTED_AT\tFINISHED_AT\tACCOUNTS\tCORRECTIONS\tERROR\n")

            try await RunWorld.populate(world, count: 20)
            // 1: aborted by the limit (5 of 20 lapsed, counted on this first night); 2: a dry run; 3: a shard's run.
            let aborted = try await CLIProcess.run(["run", "--max-revoke-ratio", "0.05", "--revoke-ratio-minimum", "10",
                                                    "--report-dir", world.reportRoot.appending(path: "1").path], environment: environment)
            #expect(aborted.status == 3)
            let dry = try await CLIProcess.run(["run", "--dry-run", "--stale-after", "0s", "--report-dir", world.reportRoot.appending(path: "2").path],
                                               environment: environment)
            #expect(dry.status == 0)
            let shard = try await CLIProcess.run(["run", "--shard", "1/4", "--max-revoke-ratio", "1", "--stale-after", "0s",
                                                  "--report-dir", world.reportRoot.appending(path: "3").path], environment: environment)
            #expect(shard.status == 0, "\(shard.stderr.suffix(1000))")

            let listed = try await CLIProcess.run(["runs"], environment: environment)
            #expect(listed.status == 0)
            let rows = listed.stdout.split(separator: "\n").dropFirst().map { $0.split(separator: "\t", omittingEmptySubsequences: false) }
            #expect(rows.map { $0[0] } == ["3", "2", "1"], "\(listed.stdout)")
            #expect(rows.map { $0[2] } == ["completed", "completed", "aborted"])
            #expect(rows.map { $0[3] } == ["no", "yes", "no"] && rows.map { $0[4] } == ["1/4", "-", "-"])
            #expect(rows[2][9].contains("would lose an entitlement"), "\(rows[2])")

            let limited = try await CLIProcess.run(["runs", "--limit", "1", "--json"], environment: environment)
            let lines = limited.stdout.split(separator: "\n")
            #expect(lines.count == 1, "\(limited.stdout)")
            let object = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any]
            #expect(object?["id"] as? Int == 3 && object?["shard"] as? String == "1/4" && object?["dry_run"] as? Bool == false)
            #expect(object?.keys.contains("error") == true && object?["error"] is NSNull, "\(limited.stdout)")

            let latest = try await CLIProcess.run(["report", "latest"], environment: environment)
            #expect(latest.status == 0 && latest.stdout.contains("# Reconciliation run 3"), "\(latest.stdout.prefix(300))")
            #expect(latest.stderr.contains("report.latest_is_a_shard"), "\(latest.stderr)")  // run 3 is shard 1/4: the others are named
            let wrong = try await CLIProcess.run(["report", "newest"], environment: environment)
            #expect(wrong.status == 2)
        }
    }
}
