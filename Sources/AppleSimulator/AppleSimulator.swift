import Foundation
import Hashing
import Locking

/// A local stand-in for Apple's verifyReceipt endpoint and App Store Server API, for the demo
/// and the project's tests.
///
/// Serves `POST /verifyReceipt` (production) and `POST /sandbox/verifyReceipt` (sandbox), the
/// Server API under `/inApps/` (production) and `/sandbox/inApps/` (sandbox; see
/// `ServerAPISimulation`), `GET /__stats` (request and connection counts), `POST /__release`
/// (held requests go on), `POST /__hold/N` (release, then hold again after N more requests) and `GET /__api_stats`
/// (the Server API's requests and 429s per endpoint, with their times), `GET /__consumption` (every
/// Send Consumption Information received). It answers from a scenario (receipt ->
/// environment, answer, scripted faults) or, for synthetic receipts, from the spec the receipt
/// carries inside itself: `base64("simulated-receipt:" + JSON spec)`, so a million accounts need
/// no stored answers.
public final class AppleSimulator: Sendable {
    public static let syntheticPrefix = "simulated-receipt:"

    let scenario: SimulationScenario
    /// Signs the Server API's answers; nil serves no API.
    let signingChain: SigningChain?
    let attempts = Locked([String: Int]())
    /// The Server API's chains, indexed by every id and by customer.
    let apiWorld: SimulatedAPIWorld
    /// What the Server API was asked, and Apple's quota on it when the scenario sets one.
    let apiTraffic: SimulatedAPITraffic
    /// Get Notification History's notifications, signed at start.
    let apiNotifications: [SimulatedHistoryNotification]
    /// Draws of `api.notification_history_faults`, one a request.
    let historyFaultDraws: Locked<SplitMix64>
    /// Every Send Consumption Information received (`GET /__consumption`).
    let consumptionLog = Locked([ReceivedConsumption]())
    private let verifyRequests = Locked(0)
    /// Which verifyReceipt requests wait for the test: `hold_after_requests`, re-armed by `POST /__hold/N`.
    private let hold: Locked<Hold>
    /// verifyReceipt requests that asked `exclude-old-transactions: true`.
    private let excludingOldTransactions = Locked(0)
    /// The benchmark's night (`POST /__night/N`): specs answer with their `night2` changes from 2 on.
    private let night = Locked(1)
    private let server: LoopbackHTTPServer

    public var port: Int { server.port }

    public init(
        scenario: SimulationScenario, signingChain: SigningChain? = nil, host: String = "127.0.0.1", port: Int = 0,
        latencyMilliseconds: Int? = nil, latencyP99Milliseconds: Int? = nil
    ) throws {
        self.scenario = scenario
        self.signingChain = signingChain
        hold = Locked(Hold(after: scenario.holdAfterRequests))
        apiWorld = SimulatedAPIWorld(scenario.apiChains)
        apiTraffic = SimulatedAPITraffic(quota: scenario.apiQuota)
        historyFaultDraws = Locked(SplitMix64(seed: scenario.notificationHistoryFaults?.seed ?? 0))
        apiNotifications = try signingChain.map { try SimulatedHistoryNotification.sign(scenario.apiNotifications, chain: $0) } ?? []
        var handler: LoopbackHTTPServer.Handler = { _, _, _, _ in .drop }
        let box = HandlerBox()
        handler = { method, path, body, authorization in
            box.simulator?.handle(method: method, path: path, body: body, authorization: authorization) ?? .drop
        }
        server = try LoopbackHTTPServer(
            host: host, port: port,
            latency: Latency(medianMilliseconds: latencyMilliseconds ?? scenario.latencyMilliseconds, p99Milliseconds: latencyP99Milliseconds),
            holdUntilInFlight: scenario.holdUntilInFlight, handler: handler)
        box.simulator = self
    }

    public func serveForever() -> Never {
        server.serveForever()
    }

    /// The tests' own endpoints (`/__stats`, `/__api_stats`, `/__release`, `/__hold/N`,
    /// `/__night/N`); nil for any other path.
    func control(method: String, path: String) -> SimulatedReply? {
        if method == "GET" && path == "/__stats" {
            let stats = server.currentStatistics
            return .respond(status: 200, body: Self.json([
                "apple_requests": verifyRequests.withLock { $0 }, "connections": stats.connections,
                "max_open_connections": stats.maximumOpenConnections, "max_in_flight": stats.maximumInFlight,
                // Every HTTP request so far, this one included: what reached "Apple" on any path.
                "http_requests": stats.requests,
                "exclude_old_transactions_requests": excludingOldTransactions.withLock { $0 },
            ]))
        }
        if method == "GET" && path == "/__consumption" {
            return .respond(status: 200, body: consumptionReceived)
        }
        if method == "GET" && path == "/__api_stats" {
            return .respond(status: 200, body: Self.json(apiTraffic.statistics))
        }
        if method == "POST" && path == "/__release" {
            hold.withLock { $0.release(thenAfter: nil) }
            return .respond(status: 200, body: Self.json(["released": true]))
        }
        if method == "POST", path.hasPrefix("/__hold/"), let more = Int(path.dropFirst("/__hold/".count)), more >= 0 {
            let count = verifyRequests.withLock { $0 }
            hold.withLock { $0.release(thenAfter: count + more) }
            return .respond(status: 200, body: Self.json(["hold_after_requests": count + more]))
        }
        if method == "POST", path.hasPrefix("/__night/"), let number = Int(path.dropFirst("/__night/".count)) {
            night.withLock { $0 = number }
            apiTraffic.startNewWindows()
            // A new first night starts over: scripted faults strike again.
            if number == 1 { attempts.withLock { $0.removeAll() } }
            return .respond(status: 200, body: Self.json(["night": number]))
        }
        return nil
    }

    /// Turns one request into Apple's answer, or into the fault scripted for this attempt.
    /// Long because verifyReceipt's steps are in order: route, decode, secret, faults, answer.
    func handle(method: String, path: String, body: [UInt8], authorization: String? = nil) -> SimulatedReply {
        if path.hasPrefix("/__"), let reply = control(method: method, path: path) { return reply }
        if path.hasPrefix("/inApps/") || path.hasPrefix("/sandbox/inApps/") {
            verifyRequests.withLock { $0 += 1 }
            return handleServerAPI(method: method, target: path, body: body, authorization: authorization)
        }
        let endpoint: String
        switch path {
        case "/verifyReceipt": endpoint = "Production"
        case "/sandbox/verifyReceipt": endpoint = "Sandbox"
        default: return .respond(status: 404, body: Array("not found\n".utf8))
        }
        let number = verifyRequests.withLock { count in
            count += 1
            return count
        }
        _ = apiTraffic.admit("verifyReceipt", environment: endpoint, limited: false)
        if let generation = hold.withLock({ $0.holds(number) }) {
            holdConnection(atMost: 120) { hold.withLock { $0.generation != generation } }
        }
        guard method == "POST" else { return .respond(status: 200, body: Self.json(["status": 21000])) }
        guard let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
              let receiptData = request["receipt-data"] as? String
        else { return .respond(status: 200, body: Self.json(["status": 21002])) }
        // As bytes: `Character.isWhitespace` per receipt was a visible share of the simulator's CPU.
        let normalized = String(decoding: receiptData.utf8.filter { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }, as: UTF8.self)
        guard let decoded = Data(base64Encoded: normalized) else {
            return .respond(status: 200, body: Self.json(["status": 21002]))
        }

        let receipt: SimulatedReceipt
        if !decoded.starts(with: Self.syntheticPrefix.utf8), let known = scenario.receipts[normalized] {
            receipt = known  // named by the scenario (a `simulated-receipt:` blob always answers from its own spec)
        } else if let spec = SimulatedAppReceipt.embeddedSpec(decoded) {
            guard let parsed = try? SimulatedReceipt(json: Data(spec), night: night.withLock { $0 }) else {
                return .respond(status: 200, body: Self.json(["status": 21002]))
            }
            receipt = parsed
        } else {
            return .respond(status: 200, body: Self.json(["status": 21003, "environment": endpoint]))
        }

        if let secret = scenario.sharedSecret, (request["password"] as? String) != secret {
            return .respond(status: 200, body: Self.json(["status": 21004, "environment": endpoint]))
        }

        // Only receipts with faults need their attempts counted: at a million accounts a counter
        // per receipt would be the simulator's largest memory.
        let attempt = receipt.faults.isEmpty ? 1 : attempts.withLock { counts in
            counts[normalized, default: 0] += 1
            return counts[normalized]!
        }
        let fault: SimulatedFault? = receipt.faults.isEmpty ? nil
            : receipt.repeatFaults ? receipt.faults[(attempt - 1) % receipt.faults.count]
            : attempt <= receipt.faults.count ? receipt.faults[attempt - 1] : nil

        if case .status(let status, let retryable, let spelling)? = fault {
            var object: [String: Any] = ["status": status, "environment": endpoint]
            if let retryable { object[spelling] = retryable }
            return .respond(status: 200, body: Self.json(object))
        }
        if case .http(let status, let retryAfter)? = fault {
            var headers: [String: String] = ["Content-Type": "text/html"]
            if let retryAfter { headers["Retry-After"] = retryAfter }
            return .respond(status: status, headers: headers, body: Array("<html><body>\(status)</body></html>".utf8))
        }
        if case .drop? = fault { return .drop }
        if case .garbage? = fault {
            return .respond(status: 200, headers: ["Content-Type": "text/html"], body: Array("<html>Apple is busy</html>".utf8))
        }
        if case .oversize(let bytes)? = fault {
            let padding = String(repeating: "x", count: max(0, bytes))
            return .respond(status: 200, body: Array(#"{"status": 0, "padding": "\#(padding)"}"#.utf8))
        }

        // The receipt's environment decides where it verifies: the wrong host says so.
        if receipt.environment == "Sandbox" && endpoint == "Production" {
            return .respond(status: 200, body: Self.json(["status": 21007]))
        }
        if receipt.environment == "Production" && endpoint == "Sandbox" {
            return .respond(status: 200, body: Self.json(["status": 21008]))
        }

        if request["exclude-old-transactions"] as? Bool == true { excludingOldTransactions.withLock { $0 += 1 } }
        let answer: [UInt8]
        do {
            answer = try receipt.answer(receiptData: normalized, environment: endpoint,
                                        excludeOldTransactions: (request["exclude-old-transactions"] as? Bool) ?? false)
        } catch {
            return .respond(status: 500, body: Array("simulator: \(error)".utf8))
        }
        switch fault {
        case .truncate?: return .truncate(status: 200, body: answer)
        case .delay(let milliseconds)?: return .delayed(milliseconds: milliseconds, then: answer)
        default: return .respond(status: 200, body: answer)
        }
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }

    /// Lets the server's handler reach the simulator that owns the server.
    ///
    /// `@unchecked Sendable`: `simulator` is written once, in `AppleSimulator.init`, before the
    /// server accepts a connection; every thread only reads it after.
    private final class HandlerBox: @unchecked Sendable {
        var simulator: AppleSimulator?
    }
}

/// The test's hold on verifyReceipt: every request numbered after `after` waits until the next
/// release. Each release starts a new generation, so the requests it let go are never caught by
/// the hold armed after it, however late their thread looks.
struct Hold {
    var after: Int?
    var generation = 0

    /// The generation `number` waits out, or nil when it goes on at once.
    func holds(_ number: Int) -> Int? {
        guard let after, number > after else { return nil }
        return generation
    }

    mutating func release(thenAfter next: Int?) {
        generation += 1
        after = next
    }
}
