import Locking

/// Apple said stop: the App Store Server API refused the key (HTTP 401), or verifyReceipt refused
/// the shared secret too many times in a row (21004). Every request not yet sent is then not sent
/// at all: the check is made just before a request leaves, after every wait for a budget token, a
/// rate slot or a concurrency permit, so a request that queued before the stop cannot slip out
/// after it. What was already on the wire comes back as it will.
public final class AppleStop: Sendable {
    private let stoppedBecause = Locked<String?>(nil)

    public init() {}

    /// Stops every request not yet sent; the first reason is kept.
    public func stop(because reason: String) {
        stoppedBecause.withLock { $0 = $0 ?? reason }
    }

    /// Why requests stopped, once they did.
    public var reason: String? { stoppedBecause.withLock { $0 } }
}
