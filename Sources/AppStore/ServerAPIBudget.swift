import AppStoreModels
import Locking
import Throttling

/// What Apple allows the app on each endpoint, in requests a second: per app and per endpoint,
/// enforced over the hour, and shared with the app server's own live calls.
public struct ServerAPIQuota: Sendable, Equatable {
    public var production: [ServerAPIEndpoint: Double]
    public var sandbox: [ServerAPIEndpoint: Double]

    /// Apple's published table: 50 a second on each of these endpoints in production, a tenth of
    /// that in the sandbox.
    public static let apple = ServerAPIQuota(
        production: Dictionary(uniqueKeysWithValues: ServerAPIEndpoint.allCases.map { ($0, 50.0) }),
        sandbox: Dictionary(uniqueKeysWithValues: ServerAPIEndpoint.allCases.map { ($0, 5.0) }))

    public init(production: [ServerAPIEndpoint: Double], sandbox: [ServerAPIEndpoint: Double]) {
        self.production = production
        self.sandbox = sandbox
    }

    public func rate(_ endpoint: ServerAPIEndpoint, _ environment: AppleEnvironment) -> Double {
        (environment == .production ? production : sandbox)[endpoint] ?? 0
    }
}

/// The job's own budget on the API: `share` of Apple's quota (the rest stays with the app server),
/// divided among the `shards` that run at once. One token bucket per (endpoint, environment); a
/// 429 pauses its bucket for every task until `Retry-After`. Counts what was asked, for the
/// summary and the metrics.
public final class ServerAPIBudget: Sendable {
    public typealias Key = ServerAPIEndpointKey

    /// One (endpoint, environment)'s traffic in a run.
    public struct Usage: Sendable, Equatable {
        /// Requests a second the job allowed itself.
        public var budget: Double
        public var requests = 0
        /// Answers of HTTP 429: Apple's quota for the app ran out (the app server's calls count too).
        public var throttled = 0
    }

    private let buckets: [Key: TokenBucket]
    private let counts: Locked<[Key: (requests: Int, throttled: Int)]>

    public init(quota: ServerAPIQuota = .apple, share: Double = 0.5, shards: Int = 1) {
        var buckets: [Key: TokenBucket] = [:]
        for endpoint in ServerAPIEndpoint.allCases {
            for environment in AppleEnvironment.allCases {
                let rate = RequestRate.clamped(quota.rate(endpoint, environment) * share / Double(max(1, shards)))
                // A second's worth at once at most: Apple counts over the hour, the app server's
                // calls arrive meanwhile, and a burst is what leaves them none.
                buckets[Key(endpoint, environment)] = TokenBucket(rate: rate, burst: max(1, Int(rate)))
            }
        }
        self.buckets = buckets
        counts = Locked([:])
    }

    /// Requests a second the job allows itself on one endpoint.
    public func budget(_ key: Key) -> Double { buckets[key]?.rate ?? 0 }

    /// Waits for a slot of the endpoint's budget, and past a pause Apple asked for.
    func acquire(_ key: Key) async {
        await buckets[key]?.acquire()
    }

    /// Counts a request that left for Apple (not one a pause or a stop held back).
    func sent(_ key: Key) {
        counts.withLock { $0[key, default: (0, 0)].requests += 1 }
    }

    /// Whether a 429 holds the endpoint now: checked again just before a request leaves.
    func isPaused(_ key: Key) -> Bool {
        buckets[key]?.isPaused ?? false
    }

    /// Apple answered 429: counted.
    func throttled(_ key: Key) {
        counts.withLock { $0[key, default: (0, 0)].throttled += 1 }
    }

    /// The endpoint waits `retryAfter` for every task (Apple's 429 means the endpoint, not the
    /// one request). Not called for a wait longer than the run waits: those requests are deferred.
    func pause(_ key: Key, for retryAfter: Duration) {
        buckets[key]?.pause(until: ContinuousClock.now + retryAfter)
    }

    /// The traffic of every (endpoint, environment) asked at least once.
    public var usage: [Key: Usage] {
        counts.withLock { counts in
            counts.reduce(into: [:]) { result, entry in
                result[entry.key] = Usage(budget: budget(entry.key), requests: entry.value.requests, throttled: entry.value.throttled)
            }
        }
    }
}
