import Foundation

extension RunReport {
    /// The metrics file after a dry run: the last real run's series as they were (a dry run
    /// applies nothing, so it is neither a night's status nor a success for the alerts), and one
    /// series of its own saying when it ran and how it ended.
    public static func dryRunMetrics(_ summary: RunSummary, previous: String?) -> String {
        let name = "receipt_reconciler_last_dry_run_timestamp_seconds"
        var lines = (previous ?? "").split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
            .filter { !$0.contains(name) }
        let finished = (summary.finishedAt ?? Date()).timeIntervalSince1970
        lines += [
            "# HELP \(name) When the last dry run finished (it applied nothing; the other series are the last real run's).",
            "# TYPE \(name) gauge",
            "\(name){kind=\"\(summary.kind.rawValue)\",status=\"\(summary.status.rawValue)\"} \(String(format: "%.3f", finished))",
        ]
        return lines.joined(separator: "\n") + "\n"
    }
}
