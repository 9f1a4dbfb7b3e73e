import Foundation
import Testing
import TestSupport
@testable import WorldSupport

/// `--log-format json`: a count is a JSON number and a flag a JSON boolean, so a log query compares
/// numbers; ids and words stay strings (docs/configuration.md, "Every command").
@Suite struct JSONLogTests {
    @Test func countsAreNumbersAndFlagsBooleansInJSONLogs() async throws {
        try await RunWorld.with("json-log") { world in
            try await RunWorld.populate(world, count: 6)
            let result = try await CLIProcess.run(
                ["run", "--log-format", "json", "--max-revoke-ratio", "1", "--progress-interval", "0.1s", "--report-dir", world.reportRoot.path],
                environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr.suffix(1000))")
            let lines = try result.stderr.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any], "not a JSON object: \($0)")
            }
            let started = try #require(lines.first { $0["message"] as? String == "run.started" })
            let finished = try #require(lines.first { $0["message"] as? String == "run.finished" })
            // JSONSerialization reads a JSON number as NSNumber and a string as String.
            #expect(finished["run.accounts"] as? Int == 6 && !(finished["run.accounts"] is String), "\(finished)")
            #expect(finished["apple.requests"] is NSNumber && finished["run.corrections"] is NSNumber)
            #expect(started["run.dry_run"] as? Bool == false && !(started["run.dry_run"] is String), "\(started)")
            #expect(started["run.id"] is NSNumber && started["run.kind"] as? String == "nightly" && started["run.shard"] as? String == "all")
            #expect(finished["run.status"] as? String == "completed" && finished["level"] as? String == "info")
            let losses = try #require(lines.first { $0["message"] as? String == "run.first_night_losses" })
            #expect(losses["loss.pro.monthly"] is NSNumber, "\(losses)")
        }
    }
}
