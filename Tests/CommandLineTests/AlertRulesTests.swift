import AppStoreModels
import Foundation
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// Issue 35, alerts: `cron/receipt-reconciler-alerts.yml` passes promtool's own unit tests, and
/// those tests feed it series the job really writes, named and labelled as in its metrics file.
@Suite struct AlertRulesTests {
    static let cron = TestPaths.repositoryRoot.appending(path: "cron")

    /// promtool from Debian's `prometheus` package (CI installs it; `RR_PROMTOOL` names another).
    static func promtool(_ arguments: [String], in directory: URL) throws -> (status: Int32, output: String) {
        let path = ProcessInfo.processInfo.environment["RR_PROMTOOL"] ?? "/usr/bin/promtool"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestSetupError(description: "no promtool at \(path): install Debian's prometheus package (.ci/run does)")
        }
        let process = Process()
        process.executableURL = URL(filePath: path)
        process.arguments = arguments
        process.currentDirectoryURL = directory
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    @Test func theAlertRulesPassPromtoolsTestsAndAWrongExpectationFailsThem() throws {
        let check = try Self.promtool(["check", "rules", "receipt-reconciler-alerts.yml"], in: Self.cron)
        #expect(check.status == 0 && check.output.contains("SUCCESS: 11 rules found"), "\(check.output)")
        let test = try Self.promtool(["test", "rules", "receipt-reconciler-alerts.test.yml"], in: Self.cron)
        #expect(test.status == 0 && test.output.contains("SUCCESS"), "\(test.output)")

        // The same tests with the failed share under the threshold (40 of 940) must fail: promtool evaluated them.
        let copy = FileManager.default.temporaryDirectory.appending(path: "rr-alerts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: copy) }
        try FileManager.default.copyItem(at: Self.cron.appending(path: "receipt-reconciler-alerts.yml"),
                                         to: copy.appending(path: "receipt-reconciler-alerts.yml"))
        let tests = try String(contentsOf: Self.cron.appending(path: "receipt-reconciler-alerts.test.yml"), encoding: .utf8)
        #expect(tests.contains("values: '100 30'"))
        try tests.replacingOccurrences(of: "values: '100 30'", with: "values: '40 30'")
            .write(to: copy.appending(path: "receipt-reconciler-alerts.test.yml"), atomically: true, encoding: .utf8)
        let wrong = try Self.promtool(["test", "rules", "receipt-reconciler-alerts.test.yml"], in: copy)
        #expect(wrong.status != 0 && wrong.output.contains("ReceiptReconcilerAccountsFailing"), "\(wrong.output)")
    }

    /// `name{k="v",...}` of each sample line of a metrics file.
    static func series(in text: String) -> Set<String> {
        Set(text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { $0.split(separator: " ").first.map(String.init) })
    }

    @Test func everySeriesInTheAlertTestsIsOneTheJobWrites() async throws {
        let written = try await Self.writtenSeries()

        let tests = try String(contentsOf: Self.cron.appending(path: "receipt-reconciler-alerts.test.yml"), encoding: .utf8)
        let used = tests.split(separator: "\n").compactMap { line -> String? in
            guard let start = line.range(of: "- series: '") else { return nil }
            return String(line[start.upperBound...].dropLast())
        }
        #expect(used.count >= 15)
        for series in used where !series.hasPrefix("node_") {
            #expect(written.contains(series), "the alert tests use \(series), which the job never writes")
        }
        // And every alert names only metrics the job writes.
        let rules = try String(contentsOf: Self.cron.appending(path: "receipt-reconciler-alerts.yml"), encoding: .utf8)
        let names = Set(written.map { String($0.prefix { $0 != "{" }) })
        for match in rules.matches(of: /receipt_reconciler_[a-z_]+/) {
            #expect(names.contains(String(match.output)), "an alert reads \(match.output), which the job never writes")
        }
    }

    /// cron/receipt-reconciler-dashboard.json (Grafana): every panel's every query names metrics the
    /// job writes, and only those, and is PromQL that promtool parses (each made a recording rule).
    @Test func theDashboardReadsOnlyMetricsTheJobWrites() async throws {
        let names = Set(try await Self.writtenSeries().map { String($0.prefix { $0 != "{" }) })
        let data = try Data(contentsOf: Self.cron.appending(path: "receipt-reconciler-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        let expressions = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(panels.count >= 8 && expressions.count >= panels.count, "\(expressions)")
        var read = Set<String>()
        for expression in expressions {
            let metrics = expression.matches(of: /receipt_reconciler_[a-z_]+/).map { String($0.output) }
            #expect(!metrics.isEmpty, "a panel's query names no metric of the job: \(expression)")
            for metric in metrics {
                #expect(names.contains(metric), "the dashboard reads \(metric), which the job never writes")
                read.insert(metric)
            }
        }
        // Every metric the job writes has a panel.
        #expect(names.subtracting(read).isEmpty, "no panel shows \(names.subtracting(read).sorted())")
        let directory = FileManager.default.temporaryDirectory.appending(path: "dashboard-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let rules = "groups:\n  - name: dashboard\n    rules:\n" + expressions.enumerated().map { index, expression in
            "      - record: dashboard_query_\(index)\n        expr: '\(expression.replacingOccurrences(of: "'", with: "''"))'\n"
        }.joined()
        try rules.write(to: directory.appending(path: "dashboard.yml"), atomically: true, encoding: .utf8)
        let check = try Self.promtool(["check", "rules", "dashboard.yml"], in: directory)
        #expect(check.status == 0, "\(check.output)")
    }

    /// Every series the job writes: a real nightly run's metrics file, the App Store Server API's
    /// families as the same writer renders a run that used it, and answer-consumption-requests' file.
    static func writtenSeries() async throws -> Set<String> {
        var written = Set<String>()
        // A real nightly run's metrics file: a completed run and then an aborted one write every status.
        try await RunWorld.with("alert-series") { world in
            try await RunWorld.populate(world, count: 3)
            let metrics = world.reportRoot.appending(path: "metrics.prom")
            let result = try await CLIProcess.run(
                ["run", "--report-dir", world.reportRoot.path, "--metrics-file", metrics.path], environment: RunWorld.environment(world))
            #expect(result.status == 0, "\(result.stderr)")
            written.formUnion(Self.series(in: try String(contentsOf: metrics, encoding: .utf8)))
        }
        // The App Store Server API's families, as the same writer renders a run that used it.
        var summary = RunSummary()
        summary.apiRequests = [
            ServerAPIEndpointKey(.history, .production): APIEndpointUsage(budgetPerSecond: 5, requests: 10, throttled: 3, seconds: 2),
            ServerAPIEndpointKey(.statuses, .production): APIEndpointUsage(budgetPerSecond: 5, requests: 10, throttled: 0, seconds: 2),
        ]
        written.formUnion(Self.series(in: RunReport.metrics(summary, previous: nil)))
        // answer-consumption-requests' own file, as its writer renders it.
        written.formUnion(Self.series(in: ConsumptionSummary().metrics))
        // A dry run's own series, as its writer renders it.
        written.formUnion(Self.series(in: RunReport.dryRunMetrics(summary, previous: nil)))
        #expect(written.contains(#"receipt_reconciler_last_run_status{kind="nightly",status="aborted"}"#), "\(written.sorted())")
        return written
    }
}
