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
