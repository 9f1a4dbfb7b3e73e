import Foundation
import Locking

/// Apple's limits on the App Store Server API, enforced as Apple enforces them: per endpoint and
/// environment, at most `rate × window` requests in each fixed window (Apple's is an hour); past
/// that, HTTP 429 with `Retry-After` (a UNIX time in milliseconds) at the window's end. The tests
/// and the benchmark scale it down with a shorter window (scenario `api_quota`, or
/// `simulate-apple --api-quota-window`):
///
///     "api_quota": {"window_seconds": 36, "production": {"history": 50}, "sandbox": {"statuses": 5}}
///
/// Endpoints are `history`, `statuses`, `notification-history` and `consumption`; a rate not given is Apple's
/// (production 50, sandbox 5 a second).
public struct SimulatedAPIQuota: Sendable, Equatable {
    public static let endpoints = ["history", "statuses", "notification-history", "consumption"]

    public var windowSeconds: Double
    public var production: [String: Double]
    public var sandbox: [String: Double]

    public init(windowSeconds: Double, production: [String: Double] = [:], sandbox: [String: Double] = [:]) {
        self.windowSeconds = max(0.001, windowSeconds)
        self.production = production
        self.sandbox = sandbox
    }

    init(spec: [String: Any]) throws {
        guard let window = (spec["window_seconds"] as? NSNumber)?.doubleValue, window > 0 else {
            throw SimulatorError("api_quota needs a positive \"window_seconds\"")
        }
        func rates(_ name: String) throws -> [String: Double] {
            var rates: [String: Double] = [:]
            for (endpoint, value) in spec[name] as? [String: Any] ?? [:] {
                guard Self.endpoints.contains(endpoint), let rate = (value as? NSNumber)?.doubleValue, rate >= 0 else {
                    throw SimulatorError("api_quota.\(name).\(endpoint): an endpoint of \(Self.endpoints) and a rate per second")
                }
                rates[endpoint] = rate
            }
            return rates
        }
        self.init(windowSeconds: window, production: try rates("production"), sandbox: try rates("sandbox"))
    }

    /// Requests allowed in one window on `endpoint` of `environment` (`Production` or `Sandbox`).
    func allowance(_ endpoint: String, environment: String) -> Int {
        let rate = (environment == "Sandbox" ? sandbox[endpoint] ?? 5 : production[endpoint] ?? 50)
        return Int((rate * windowSeconds).rounded(.down))
    }
}

/// What the simulated API was asked, per `endpoint/environment`: for the quota, and for tests that
/// check the job kept to its budget (`GET /__api_stats`).
final class SimulatedAPITraffic: Sendable {
    private struct Endpoint {
        var requests = 0
        var throttled = 0
        /// UNIX milliseconds of each request let through and of each 429, the first 100,000.
        var arrivals: [Int64] = []
        var throttledAt: [Int64] = []
        var window = -1
        var inWindow = 0
    }

    private let quota: SimulatedAPIQuota?
    /// When the first window began: at the first request, not when the simulator started, so a
    /// test's first request finds a whole window however long its set-up took on a loaded machine.
    private let started = Locked<Date?>(nil)
    private let state = Locked([String: Endpoint]())
    private static let keptTimes = 100_000

    init(quota: SimulatedAPIQuota?) {
        self.quota = quota
    }

    /// Counts one request; nil lets it through, else the UNIX milliseconds to send as `Retry-After`.
    /// `limited: false` only records it (verifyReceipt has no quota): its arrivals are what a test
    /// of `--rate-limit` reads.
    func admit(_ endpoint: String, environment: String, limited: Bool = true) -> Int64? {
        let now = Date()
        let milliseconds = Int64(now.timeIntervalSince1970 * 1000)
        let started = started.withLock { started in
            let first = started ?? now
            started = first
            return first
        }
        return state.withLock { state in
            var traffic = state["\(endpoint)/\(environment)", default: Endpoint()]
            defer { state["\(endpoint)/\(environment)"] = traffic }
            if let quota, limited {
                let window = Int(now.timeIntervalSince(started) / quota.windowSeconds)
                if window != traffic.window { (traffic.window, traffic.inWindow) = (window, 0) }
                if traffic.inWindow >= quota.allowance(endpoint, environment: environment) {
                    traffic.throttled += 1
                    if traffic.throttledAt.count < Self.keptTimes { traffic.throttledAt.append(milliseconds) }
                    let windowEnd = started.addingTimeInterval(Double(window + 1) * quota.windowSeconds)
                    return Int64((windowEnd.timeIntervalSince1970 * 1000).rounded(.up))
                }
                traffic.inWindow += 1
            }
            traffic.requests += 1
            if traffic.arrivals.count < Self.keptTimes { traffic.arrivals.append(milliseconds) }
            return nil
        }
    }

    /// A new night (`POST /__night/N`): every endpoint's window starts over at its next request,
    /// as a night's budget does after a day of Apple's hours.
    func startNewWindows() {
        started.withLock { $0 = nil }
        state.withLock { state in
            for key in state.keys { (state[key]!.window, state[key]!.inWindow) = (-1, 0) }
        }
    }

    /// `{"history/Production": {"requests": N, "throttled": M, "arrivals_ms": [...], "throttled_ms": [...]}, ...}`.
    var statistics: [String: Any] {
        state.withLock { state in
            state.mapValues { traffic -> [String: Any] in
                ["requests": traffic.requests, "throttled": traffic.throttled, "arrivals_ms": traffic.arrivals, "throttled_ms": traffic.throttledAt]
            }
        }
    }
}
