import Foundation
import HTTP

/// `receipt-reconciler simulate-apple`, started as a real process on a free loopback port.
public final class SimulatorProcess: @unchecked Sendable {
    // Immutable after init; `Process` is only touched again in `stop()`.
    public let port: Int
    private let process: Process
    private let scenarioFile: URL
    /// The simulator exits when this pipe closes: when the test process ends, however it ends.
    private let lifeline = Pipe()

    public var productionURL: String { "http://127.0.0.1:\(port)/verifyReceipt" }
    /// The Server API's base addresses.
    public var apiURL: String { "http://127.0.0.1:\(port)" }
    public var sandboxAPIURL: String { "http://127.0.0.1:\(port)/sandbox" }
    /// Where the simulator keeps its signing chain; `root.der` there is what the job must trust.
    public let signingDirectory: URL
    public var signingRoot: [UInt8] { (try? Array(Data(contentsOf: signingDirectory.appending(path: "root.der")))) ?? [] }
    public var processIdentifier: Int32 { process.processIdentifier }
    public var sandboxURL: String { "http://127.0.0.1:\(port)/sandbox/verifyReceipt" }

    /// Starts the simulator with `scenario` (the JSON object of a scenario file).
    public init(scenario: [String: Any] = [:], arguments: [String] = []) throws {
        scenarioFile = FileManager.default.temporaryDirectory.appending(path: "scenario-\(UUID().uuidString).json")
        try JSONSerialization.data(withJSONObject: scenario).write(to: scenarioFile)
        process = Process()
        process.executableURL = TestPaths.binaries.appending(path: "receipt-reconciler")
        var arguments = arguments
        if let index = arguments.firstIndex(of: "--signing-dir"), index + 1 < arguments.count {
            signingDirectory = URL(filePath: arguments[index + 1])
        } else {
            signingDirectory = FileManager.default.temporaryDirectory.appending(path: "rr-signing-\(UUID().uuidString)")
            arguments += ["--signing-dir", signingDirectory.path]
        }
        process.arguments = ["simulate-apple", "--scenario", scenarioFile.path, "--port", "0", "--exit-when-stdin-closes"] + arguments
        let text = try startServer(process, lifeline: lifeline, name: "simulate-apple")
        guard let portText = text.split(separator: ":").last?.split(separator: "\n").first, let port = Int(portText) else {
            throw TestSetupError(description: "unexpected simulate-apple output: \(text)")
        }
        self.port = port
    }

    deinit { stop() }

    public func stop() {
        // Its stdin closing ends it; SIGKILL makes sure (it holds nothing worth a clean stop).
        try? lifeline.fileHandleForWriting.close()
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: scenarioFile)
    }

    /// Lets the requests held by `hold_after_requests` go on.
    public func release() async throws {
        try await post("/__release")
    }

    /// Lets the held requests go on, and holds every verifyReceipt request after `more` further ones.
    public func hold(after more: Int) async throws {
        try await post("/__hold/\(more)")
    }

    /// A new night: answers of `night2` specs from 2 on, and Apple's quota windows start over.
    public func night(_ number: Int) async throws {
        try await post("/__night/\(number)")
    }

    private func post(_ path: String) async throws {
        let client = HTTPClient()
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(port)\(path)", method: "POST"))
        guard response.status == 200 else { throw TestSetupError(description: "the simulator answered \(response.status) to POST \(path)") }
    }

    /// The simulator's counters: requests, connections, max_open_connections, max_in_flight.
    public func statistics() async throws -> [String: Int] {
        let client = HTTPClient()
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(port)/__stats", method: "GET"))
        return try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Int] ?? [:]
    }
}

/// What the simulated App Store Server API saw of one `endpoint/environment`.
public struct SimulatedAPIStatistics: Sendable {
    public var requests: Int
    public var throttled: Int
    /// UNIX milliseconds of each request let through, and of each answered 429.
    public var arrivals: [Int64]
    public var throttledAt: [Int64]
}

extension SimulatorProcess {
    /// The Server API's traffic by `history/Production`, `statuses/Sandbox`...
    public func apiStatistics() async throws -> [String: SimulatedAPIStatistics] {
        let client = HTTPClient()
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(port)/__api_stats", method: "GET"))
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: [String: Any]] ?? [:]
        return object.mapValues { value in
            SimulatedAPIStatistics(
                requests: value["requests"] as? Int ?? 0, throttled: value["throttled"] as? Int ?? 0,
                arrivals: (value["arrivals_ms"] as? [NSNumber] ?? []).map(\.int64Value),
                throttledAt: (value["throttled_ms"] as? [NSNumber] ?? []).map(\.int64Value))
        }
    }
}

/// A base64 blob naming a receipt in a scenario file.
public func receiptBlob(_ name: String) -> String {
    Data("receipt:\(name)".utf8).base64EncodedString()
}

/// A synthetic receipt: the simulator derives Apple's answer from the spec inside it.
public func syntheticReceipt(_ spec: [String: Any]) -> String {
    let json = (try? JSONSerialization.data(withJSONObject: spec, options: [.sortedKeys])) ?? Data()
    return (Data("simulated-receipt:".utf8) + json).base64EncodedString()
}

/// Starts a server process whose stdin is `lifeline` (it exits when the test process ends) and
/// returns the first line it prints (where it listens).
func startServer(_ process: Process, lifeline: Pipe, name: String) throws -> String {
    let output = Pipe()
    process.standardOutput = output
    // Never inherit the test runner's stderr: a leftover child would keep `swift test` waiting for it.
    process.standardError = FileHandle.nullDevice
    process.standardInput = lifeline
    try process.run()
    do {
        return try readLine(output.fileHandleForReading, from: name)
    } catch {
        kill(process.processIdentifier, SIGKILL)
        throw error
    }
}

/// The next line `name` prints on `handle`, waiting at most `timeout`: a server that never
/// answers fails its test by name instead of holding a thread of the cooperative pool forever.
func readLine(_ handle: FileHandle, from name: String, timeout: Duration = .seconds(120)) throws -> String {
    let deadline = ContinuousClock.now + timeout
    var line = Data()
    while !line.contains(10) {
        let left = deadline - ContinuousClock.now
        var ready = pollfd(fd: handle.fileDescriptor, events: Int16(POLLIN), revents: 0)
        let milliseconds = max(0, Int32(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
        let polled = poll(&ready, 1, milliseconds)
        if polled < 0 && errno == EINTR { continue }
        guard polled > 0 else { throw TestSetupError(description: "\(name) printed no line within \(timeout)") }
        let chunk = handle.availableData
        if chunk.isEmpty { throw TestSetupError(description: "\(name) exited before printing a line") }
        line.append(chunk)
    }
    return String(decoding: line, as: UTF8.self)
}
