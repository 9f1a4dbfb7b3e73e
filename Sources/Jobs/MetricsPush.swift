import Foundation
import HTTP
import Logging

/// Pushes a run's metrics to a Prometheus Pushgateway (`--metrics-push URL`): where a batch job's
/// metrics go on Kubernetes, where a pod's files vanish with it (docs/operating.md, "Metrics").
///
/// Each run pushes to its own group (`job`, `kind` and, for a shard, `shard`) with POST, which
/// replaces only the metrics it names: a run that did not complete leaves the group's
/// `last_success_timestamp_seconds` as the last completed run pushed it, and a dry run pushes only
/// its own `last_dry_run_timestamp_seconds`, as the metrics file keeps them.
public struct MetricsPush: Sendable {
    /// The Pushgateway, e.g. `http://pushgateway:9091`; its user and password, if any, are never logged.
    public var gateway: URL

    public init(gateway: URL) {
        self.gateway = gateway
    }

    /// Why a URL cannot be a Pushgateway's, or nil.
    public static func problem(with url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host() != nil else {
            return "--metrics-push takes the Pushgateway's http:// or https:// URL, e.g. http://pushgateway:9091"
        }
        guard url.query() == nil, url.fragment() == nil else { return "--metrics-push takes the Pushgateway's URL without a query or fragment" }
        return nil
    }

    /// The group's URL: `/metrics/job/receipt_reconciler/kind/KIND[/shard/K_of_N]`.
    public func groupURL(kind: String, shard: String?) -> URL {
        var url = gateway.appending(path: "metrics/job/receipt_reconciler/kind").appending(path: kind)
        if let shard { url = url.appending(path: "shard").appending(path: shard.replacingOccurrences(of: "/", with: "_of_")) }
        return url
    }

    /// The gateway's address as it may be logged: no user, no password.
    public var displayed: String {
        var components = URLComponents(url: gateway, resolvingAgainstBaseURL: false)
        components?.user = nil
        components?.password = nil
        return components?.string ?? "(the --metrics-push URL)"
    }

    /// Pushes `text` (Prometheus text format) to the group; tries twice. Throws what the last try met.
    public func push(_ text: String, kind: String, shard: String?) async throws {
        let client = HTTPClient(configuration: .init(maximumConnectionsPerHost: 1, preferMultiplexing: false))
        defer { client.shutdown() }
        let request = HTTPRequest(
            url: groupURL(kind: kind, shard: shard).absoluteString, method: "POST",
            headers: ["Content-Type: text/plain; version=0.0.4"], body: Array(text.utf8),
            connectTimeout: .seconds(5), totalTimeout: .seconds(15), maximumResponseBytes: 64 << 10)
        var failure: any Error = MetricsPushFailed(gateway: displayed, reason: "not tried")
        for attempt in 1...2 {
            do {
                let response = try await client.execute(request)
                if (200..<300).contains(response.status) { return }
                let said = String(decoding: response.body.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                failure = MetricsPushFailed(gateway: displayed, reason: "HTTP \(response.status): \(said)")
                if (400..<500).contains(response.status) { break }  // the gateway refused these metrics: again is the same
            } catch {
                failure = MetricsPushFailed(gateway: displayed, reason: "\(error)")
            }
            if attempt == 1 { try? await Task.sleep(for: .seconds(1)) }
        }
        throw failure
    }
}

extension MetricsPush {
    /// Pushes and says so in the log: `metrics.pushed`, or `metrics.push_failed` and nothing else
    /// (the command's work is committed; the stale success time raises the alert).
    public func publish(_ text: String, kind: String, shard: String?, logger: Logger) async {
        do {
            try await push(text, kind: kind, shard: shard)
            logger.info("metrics.pushed", metadata: ["metrics.gateway": "\(displayed)"])
        } catch {
            logger.error("metrics.push_failed", metadata: ["error": "\(error)"])
        }
    }
}

/// The Pushgateway did not take the run's metrics: the run's own work stands.
public struct MetricsPushFailed: Error, CustomStringConvertible {
    public var gateway: String
    public var reason: String
    public var description: String { "the metrics were not pushed to \(gateway): \(reason)" }
}
