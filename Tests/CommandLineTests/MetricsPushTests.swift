import Foundation
import Testing
import TestSupport
@testable import WorldSupport

/// `--metrics-push`: the run's metrics reach a real Pushgateway (Debian's), each run in its own
/// group, a night that did not complete never overwriting the last success, a dry run only its own
/// series (docs/operating.md, "Metrics").
@Suite(.serialized) struct MetricsPushTests {
    static func value(_ samples: [String], _ prefix: String, _ containing: [String] = []) -> String? {
        samples.first { $0.hasPrefix(prefix) && containing.allSatisfy($0.contains) }?.split(separator: " ").last.map(String.init)
    }

    @Test func eachRunPushesToItsGroupAndOnlyACompletedRunMovesTheLastSuccess() async throws {
        let gateway = try await PushgatewayProcess()
        defer { gateway.stop() }
        try await RunWorld.with("metrics-push") { world in
            try await RunWorld.populate(world, count: 20)
            let environment = RunWorld.environment(world)
            func run(_ name: String, _ extra: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
                try await CLIProcess.run(
                    ["run", "--stale-after", "0s", "--metrics-push", gateway.url, "--report-dir", world.reportRoot.appending(path: name).path] + extra,
                    environment: environment)
            }
            let nightly = ["job=\"receipt_reconciler\"", "kind=\"nightly\""]
            let status = { (samples: [String], status: String) in
                Self.value(samples, "receipt_reconciler_last_run_status{", nightly + ["status=\"\(status)\""])
            }

            // Aborted by the limit (5 of 20 lose access on this first night): its status, no success.
            let aborted = try await run("aborted", ["--max-revoke-ratio", "0.05", "--revoke-ratio-minimum", "10"])
            #expect(aborted.status == 3, "\(aborted.stderr.suffix(1000))")
            var samples = try await gateway.samples()
            #expect(status(samples, "aborted") == "1", "\(samples)")
            #expect(Self.value(samples, "receipt_reconciler_last_success_timestamp_seconds{") == nil, "\(samples)")
            #expect(aborted.stderr.contains("metrics.pushed"))

            // Completed: the success time appears, the corrections by kind with it.
            let completed = try await run("completed", ["--max-revoke-ratio", "1"])
            #expect(completed.status == 0, "\(completed.stderr.suffix(1000))")
            samples = try await gateway.samples()
            let success = try #require(Self.value(samples, "receipt_reconciler_last_success_timestamp_seconds{", nightly), "\(samples)")
            #expect(status(samples, "completed") == "1" && status(samples, "aborted") == "0")
            #expect(Self.value(samples, "receipt_reconciler_last_run_corrections{", nightly + ["correction=\"revoke\""]) == "5", "\(samples)")

            // A dry run: its own series only; the night's status and success stand.
            let dry = try await run("dry", ["--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr.suffix(1000))")
            samples = try await gateway.samples()
            #expect(Self.value(samples, "receipt_reconciler_last_dry_run_timestamp_seconds{", nightly) != nil, "\(samples)")
            #expect(status(samples, "completed") == "1")
            #expect(Self.value(samples, "receipt_reconciler_last_success_timestamp_seconds{", nightly) == success)

            // Interrupted (SIGTERM while Apple holds its answers): its status; the success stands.
            try await world.simulator.hold(after: 0)
            let cli = try CLIProcess(["run", "--stale-after", "0s", "--metrics-push", gateway.url, "--report-dir",
                                      world.reportRoot.appending(path: "interrupted").path], environment: environment)
            try await waitUntil("the run started") { cli.standardErrorSoFar.contains("run.started") }
            cli.signal(SIGTERM)
            try await waitUntil("the run heard the signal") { cli.standardErrorSoFar.contains("run.signal=") }
            try await world.simulator.release()
            let interrupted = try await cli.wait()
            #expect(interrupted.status == 1, "\(interrupted.stderr.suffix(1000))")
            samples = try await gateway.samples()
            #expect(status(samples, "interrupted") == "1" && status(samples, "completed") == "0", "\(samples)")
            #expect(Self.value(samples, "receipt_reconciler_last_success_timestamp_seconds{", nightly) == success)

            // A shard's run: a group of its own; the unsharded group is untouched.
            let shard = try await run("shard", ["--shard", "1/4"])
            #expect(shard.status == 0, "\(shard.stderr.suffix(1000))")
            samples = try await gateway.samples()
            #expect(Self.value(samples, "receipt_reconciler_last_run_status{", nightly + ["shard=\"1_of_4\"", "status=\"completed\""]) == "1")
            #expect(Self.value(samples, "receipt_reconciler_last_success_timestamp_seconds{", nightly + ["shard=\"1_of_4\""]) != nil, "\(samples)")
            let unsharded = samples.filter { !$0.contains("shard=") }
            #expect(status(unsharded, "interrupted") == "1", "\(samples)")
            #expect(Self.value(unsharded, "receipt_reconciler_last_success_timestamp_seconds{", nightly) == success)
        }
    }

    /// A gateway that cannot be reached (named by METRICS_PUSH_URL): the run's work and exit status stand, the failure is
    /// logged, and the URL's password never appears.
    @Test func aGatewayThatCannotBeReachedIsLoggedAndChangesNothingElse() async throws {
        try await RunWorld.with("metrics-push-down") { world in
            try await RunWorld.populate(world, count: 5)
            // From METRICS_PUSH_URL, as a URL with a password should come (arguments show in `ps`).
            var environment = RunWorld.environment(world)
            environment["METRICS_PUSH_URL"] = "http://pusher:s3cr3t-pw@127.0.0.1:9/"
            let result = try await CLIProcess.run(["run", "--max-revoke-ratio", "1", "--report-dir", world.reportRoot.path], environment: environment)
            #expect(result.status == 0, "\(result.stderr.suffix(1000))")
            #expect(result.stderr.contains("metrics.push_failed") && result.stderr.contains("http://127.0.0.1:9/"), "\(result.stderr)")
            #expect(!result.stderr.contains("s3cr3t-pw") && !result.stdout.contains("s3cr3t-pw"))
            let bad = try await CLIProcess.run(["run", "--metrics-push", "ftp://127.0.0.1/x"], environment: RunWorld.environment(world))
            #expect(bad.status == 2 && bad.stderr.contains("--metrics-push takes the Pushgateway's http:// or https:// URL"), "\(bad.stderr)")
        }
    }
}
