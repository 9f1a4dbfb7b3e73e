import Foundation
import HTTP

/// A Prometheus Pushgateway from Debian's `prometheus-pushgateway`, on a loopback port of its own,
/// kept in memory only (no persistence file): what `--metrics-push` pushes to in the tests.
public final class PushgatewayProcess: @unchecked Sendable {
    public let port: Int
    private let running: Process

    public var url: String { "http://127.0.0.1:\(port)" }

    public init() async throws {
        let path = ProcessInfo.processInfo.environment["RR_PUSHGATEWAY"] ?? "/usr/bin/prometheus-pushgateway"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestSetupError(description: "no Pushgateway at \(path): install Debian's prometheus-pushgateway package (.ci/run does)")
        }
        var lastError = ""
        for _ in 0..<5 {
            let port = Int.random(in: 20_000...45_000)
            let process = Process()
            process.executableURL = URL(filePath: path)
            // Debian persists to /var/lib/prometheus by default: an empty file keeps it in memory.
            process.arguments = ["--web.listen-address=127.0.0.1:\(port)", "--persistence.file=", "--log.level=warn"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            if await Self.ready(port: port) {
                self.port = port
                running = process
                return
            }
            process.terminate()
            process.waitUntilExit()
            lastError = "port \(port) did not answer"
        }
        throw TestSetupError(description: "the Pushgateway did not start: \(lastError)")
    }

    private static func ready(port: Int) async -> Bool {
        let client = HTTPClient()
        defer { client.shutdown() }
        for _ in 0..<100 {
            if let answer = try? await client.execute(HTTPRequest(url: "http://127.0.0.1:\(port)/-/ready", method: "GET")), answer.status == 200 {
                return true
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// The samples it exposes whose name starts with `prefix`, one line each, as Prometheus scrapes them.
    public func samples(_ prefix: String = "receipt_reconciler_") async throws -> [String] {
        let client = HTTPClient()
        defer { client.shutdown() }
        let answer = try await client.execute(HTTPRequest(url: "\(url)/metrics", method: "GET"))
        return String(decoding: answer.body, as: UTF8.self).split(separator: "\n").map(String.init).filter { $0.hasPrefix(prefix) }
    }

    public func stop() {
        guard running.isRunning else { return }
        running.terminate()
        running.waitUntilExit()
    }

    deinit { stop() }
}
