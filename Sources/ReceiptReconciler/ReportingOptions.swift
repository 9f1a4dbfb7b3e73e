import ArgumentParser
import CommandLineValues
import Foundation
import Jobs

/// Where the run says what it did: the report, the metrics file, the progress lines.
struct ReportingOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Where the report goes (default: reports/run-ID).", valueName: "directory"))
    var reportDir: String?

    @Option(help: ArgumentHelp("Write Prometheus metrics of the run here, for node_exporter's textfile collector.", valueName: "path"))
    var metricsFile: String?

    @Option(help: ArgumentHelp(
        "Push Prometheus metrics of the run to this Pushgateway at its end (on Kubernetes, where a pod's files vanish with it), e.g. http://pushgateway:9091 (default: $METRICS_PUSH_URL; prefer the variable for a URL with a password: arguments show in `ps`).",
        valueName: "url"))
    var metricsPush: String?

    @Option(help: "How often a progress line is logged when stderr is not a terminal.")
    var progressInterval = TimeLength(RunOptions.defaults.progressInterval)

    func validate() throws {
        guard progressInterval.seconds >= 0.1 else { throw ValidationError("--progress-interval must be at least 100ms") }
    }

    func apply(to options: inout RunOptions) {
        options.reportDirectory = reportDir.map { URL(filePath: $0) }
        options.metricsFile = metricsFile.map { URL(filePath: $0) }
        options.progressInterval = progressInterval.duration
    }
}

/// `--metrics-push URL`, else `METRICS_PUSH_URL`: the Pushgateway a command pushes its metrics to.
enum MetricsPushSetting {
    static func resolve(_ option: String?) throws -> MetricsPush? {
        let environment = ProcessInfo.processInfo.environment["METRICS_PUSH_URL"].flatMap { $0.isEmpty ? nil : $0 }
        guard let text = option ?? environment else { return nil }
        // The URL itself is never repeated: it may hold the gateway's password.
        guard let url = URL(string: text) else { throw ConfigurationError("--metrics-push (or METRICS_PUSH_URL): not a URL") }
        if let problem = MetricsPush.problem(with: url) { throw ConfigurationError(problem) }
        return MetricsPush(gateway: url)
    }
}
