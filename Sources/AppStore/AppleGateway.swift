import HTTP
import Throttling

/// The one way to Apple, built once per process and handed to each client: the connections, the
/// concurrency and rate limits, the storm gate, the stop switch and the Server API's budget. So
/// verifyReceipt and the App Store Server API share every limit when both ask, and either runs
/// without the other (Apple has deprecated verifyReceipt; the Server API does not need it).
public final class AppleGateway: Sendable {
    let http: HTTPClient
    let limiter: ConcurrencyLimiter
    let rateLimiter: RateLimiter?
    /// A storm of transient failures from either endpoint pauses every request.
    public let stormGate: StormGate
    /// Once Apple said stop (a 401, the 21004 stop), nothing more is sent through this gateway.
    public let appleStop = AppleStop()
    /// The job's share of Apple's quota per Server API endpoint; nil asks as fast as the limits let it.
    public let budget: ServerAPIBudget?

    /// - Parameters:
    ///   - concurrency: HTTP requests in flight at once, across all clients.
    ///   - requestsPerSecond: optional ceiling on the request rate, across all clients.
    ///   - trustedCertificatesFile: CAs to trust instead of the system's (a test's own server).
    ///   - proxy: the proxy every request goes through (`--apple-proxy`); nil for none.
    public init(
        concurrency: Int = 64, requestsPerSecond: Double? = nil, maximumConnectionsPerHost: Int? = nil,
        stormGate: StormGate = StormGate(), budget: ServerAPIBudget? = nil, trustedCertificatesFile: String? = nil, proxy: String? = nil
    ) {
        http = HTTPClient(configuration: .init(
            maximumConnectionsPerHost: maximumConnectionsPerHost ?? concurrency, trustedCertificatesFile: trustedCertificatesFile, proxy: proxy))
        limiter = ConcurrencyLimiter(limit: concurrency)
        rateLimiter = requestsPerSecond.map { RateLimiter(requestsPerSecond: $0) }
        self.stormGate = stormGate
        self.budget = budget
    }

    /// Closes the connections; the owner calls it once every client is done.
    public func shutdown() {
        http.shutdown()
    }

    /// Waits out a storm pause, then for a slot of the request rate.
    func waitForTurn() async {
        await stormGate.waitIfPaused()
        if let rateLimiter { await rateLimiter.acquire() }
    }

    /// Sends `request` once it holds a concurrency permit, unless Apple said stop meanwhile (nil):
    /// checked after the wait, just before the request leaves. `mayLeave` adds a caller's own
    /// check at the same moment (the Server API's endpoint pause after a 429); `whileHeld` reads
    /// the answer before the permit is released, so that a stop or a pause it sets holds every
    /// request waiting for that permit.
    func send<Read>(_ request: HTTPRequest, mayLeave: () -> Bool = { true }, whileHeld: (HTTPResponse) -> Read) async throws -> Read? {
        try await limiter.withPermit {
            guard appleStop.reason == nil, mayLeave() else { return nil }
            return whileHeld(try await http.execute(request))
        }
    }
}
