/// Waits for a condition the test cannot be told about (a backend waiting on a lock, a batch
/// committed, a connection freed), polling; fails the test after `timeout` (generous: the
/// sanitized suite runs many worlds at once) instead of waiting forever. Never a fixed sleep:
/// a sleep is too short on a slow machine and wasted on a fast one.
public func waitUntil(_ what: String, timeout: Duration = .seconds(180), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw TestSetupError(description: "timed out waiting until \(what)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
