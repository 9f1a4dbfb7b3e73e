@testable import AppStore
import AppStoreModels
import Testing
import Throttling

/// Issue 32: a rate reaches the throttles as a `Double`; none, however odd, traps them.
@Suite struct RequestRateTests {
    @Test(arguments: [Double.nan, .infinity, -.infinity, 1e300, -1, 0, 1e-300, 0.5, 100_000, 100_001])
    func everyRateIsClampedIntoTheRange(rate: Double) async {
        let clamped = RequestRate.clamped(rate)
        #expect(RequestRate.range.contains(clamped))
        if RequestRate.range.contains(rate) { #expect(clamped == rate) }
        #expect(RequestRate.interval(rate) >= .microseconds(10))
        #expect(TokenBucket(rate: rate, burst: 3).rate == clamped)
        _ = RateLimiter(requestsPerSecond: rate)
        // The Server API's budget takes a quota times a share over shards: a second's burst of it.
        let budget = ServerAPIBudget(quota: ServerAPIQuota(production: [.history: rate], sandbox: [:]), share: 1)
        #expect(RequestRate.range.contains(budget.budget(ServerAPIBudget.Key(.history, .production))))
    }
}
