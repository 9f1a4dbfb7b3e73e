import Foundation
import Logging
import Reconciliation
import Locking

/// Shows how far a run is: on a terminal, one line rewritten in place (done/total, rate, ETA);
/// otherwise (cron, systemd) a structured log line per interval.
final class ProgressReporter: Sendable {
    static var isTerminal: Bool { isatty(STDERR_FILENO) == 1 }

    private let interval: Duration
    private let total: Int?
    private let logger: Logger
    private let started = ContinuousClock.now
    private let last = Locked(ContinuousClock.now)

    init(interval: Duration, total: Int?, logger: Logger) {
        self.interval = interval
        self.total = total
        self.logger = logger
    }

    func report(_ summary: RunSummary) {
        let now = ContinuousClock.now
        let due = last.withLock { last in
            guard now - last >= (Self.isTerminal ? .milliseconds(500) : interval) else { return false }
            last = now
            return true
        }
        guard due else { return }
        let elapsed = Double((now - started).components.seconds) + Double((now - started).components.attoseconds) / 1e18
        let rate = elapsed > 0 ? Double(summary.accountsProcessed) / elapsed : 0
        if Self.isTerminal {
            var line = "\r\(summary.accountsProcessed)"
            if let total { line += "/\(total)" }
            line += " accounts, \(String(format: "%.0f", rate))/s, \(summary.totalCorrections) corrections"
            if let total, rate > 0 {
                let remaining = Double(max(0, total - summary.accountsProcessed)) / rate
                line += String(format: ", ETA %dm%02ds", Int(remaining) / 60, Int(remaining) % 60)
            }
            FileHandle.standardError.write(Data((line + "   ").utf8))
        } else {
            // A log read by a person at 3 a.m. says how far, of how many, and how long is left.
            var metadata: Logger.Metadata = [
                "run.accounts": .stringConvertible(summary.accountsProcessed), "run.accounts_per_second": .stringConvertible((rate * 10).rounded() / 10),
                "run.corrections": .stringConvertible(summary.totalCorrections), "apple.requests": .stringConvertible(summary.appleRequests),
            ]
            if let total {
                metadata["run.accounts_total"] = .stringConvertible(total)
                if rate > 0 { metadata["run.eta_seconds"] = .stringConvertible(Int(Double(max(0, total - summary.accountsProcessed)) / rate)) }
            }
            logger.info("run.progress", metadata: metadata)
        }
    }

    func finish() {
        if Self.isTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
