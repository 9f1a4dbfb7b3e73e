import Logging
import AppStore
import AppStoreModels
import Foundation
import Throttling
import HTTP
import Testing
import TestSupport

/// The client against the real simulator over loopback.
@Suite struct VerifyReceiptClientTests {
    static let secret = "shh-\(UUID().uuidString)"
    /// Fast to retry, patient to answer: these tests count attempts, so no attempt may time out
    /// by accident. Under the whole sanitized suite a 2 MB answer once took over the 5 s this
    /// allowed, and the oversize test saw a timeout's retry before its refusal. Tests of the
    /// timeouts set their own.
    static let fastPolicy = VerificationPolicy(
        maximumAttempts: 3, backoff: Backoff(base: .milliseconds(5), maximum: .milliseconds(20)),
        connectTimeout: .seconds(60), requestTimeout: .seconds(60))

    static func client(_ simulator: SimulatorProcess, policy: VerificationPolicy = fastPolicy, concurrency: Int = 16,
                       connections: Int? = nil, secret: String? = secret) -> VerifyReceiptClient {
        VerifyReceiptClient(
            endpoints: .init(production: simulator.productionURL, sandbox: simulator.sandboxURL),
            sharedSecret: secret, policy: policy,
            gateway: AppleGateway(concurrency: concurrency, maximumConnectionsPerHost: connections), logger: .quiet)
    }

    static func scenario(_ receipts: [String: [String: Any]], latency: Int = 0) -> [String: Any] {
        var entries: [String: Any] = [:]
        for (name, spec) in receipts { entries[receiptBlob(name)] = spec }
        return ["shared_secret": secret, "latency_ms": latency, "receipts": entries]
    }

    static var answer: [String: Any] {
        ["subscriptions": [["product_id": "pro.monthly", "original_transaction_id": "1000001", "renewals": 2]]]
    }

    @Test func routesByEnvironmentWithOneHop() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "prod": ["environment": "Production", "generate": Self.answer],
            "sand": ["environment": "Sandbox", "generate": Self.answer],
        ]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }

        let production = await client.verify(receipt: receiptBlob("prod"))
        #expect(production.receiptOutcome == .verified)
        #expect(production.endpoints == [.production])
        #expect(production.environment == .production)
        #expect(production.finalStatus == 0)

        let sandbox = await client.verify(receipt: receiptBlob("sand"))
        #expect(sandbox.receiptOutcome == .verified)
        #expect(sandbox.endpoints == [.production, .sandbox])
        #expect(sandbox.attempts == 1)
        #expect(sandbox.environment == .sandbox)

        let knownSandbox = await client.verify(receipt: receiptBlob("sand"), knownEnvironment: .sandbox)
        #expect(knownSandbox.endpoints == [.sandbox])

        let movedBack = await client.verify(receipt: receiptBlob("prod"), knownEnvironment: .sandbox)
        #expect(movedBack.endpoints == [.sandbox, .production])
        #expect(movedBack.environment == .production)
    }

    @Test func atMostOneRedirectHopPerAttempt() async throws {
        // A sandbox receipt whose sandbox host also answers 21007, as has been seen.
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "loop": ["environment": "Sandbox", "faults": [["status": 21007]], "repeat_faults": true],
        ]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("loop"))
        #expect(outcome.receiptOutcome == .failed)
        #expect(outcome.endpoints == [.production, .sandbox])
        #expect(outcome.requests == 2)
        #expect(outcome.attempts == 1)
        #expect(outcome.finalStatus == 21007)
    }

    static var retried: [String: [String: Any]] { [
        "21199 flagged true": ["status": 21199, "is_retryable": true],
        "21100 flag hyphenated 1": ["status": 21100, "is-retryable": 1],
        "21150 without flag": ["status": 21150],
        "21002": ["status": 21002],
        "21005": ["status": 21005],
        "21009": ["status": 21009],
        "HTTP 503": ["http": 503],
        "HTTP 500": ["http": 500],
        "HTTP 429": ["http": 429],
        "dropped connection": ["drop": true],
        "truncated body": ["truncate": true],
        "not JSON": ["garbage": true],
    ] }

    @Test(arguments: retried.keys.sorted())
    func transientTroubleIsRetried(_ label: String) async throws {
        let fault = try #require(Self.retried[label])
        let simulator = try SimulatorProcess(scenario: Self.scenario(["r": ["generate": Self.answer, "faults": [fault]]]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("r"))
        #expect(outcome.receiptOutcome == .verified, "\(label): \(outcome.reason ?? "")")
        #expect(outcome.attempts == 2)
        #expect(outcome.requests == 2)
        #expect(outcome.finalStatus == 0)
    }

    static var permanent: [String: (fault: [String: Any], status: Int?)] { [
        "21000": (["status": 21000], 21000),
        "21003": (["status": 21003], 21003),
        "21010 flagged false": (["status": 21010, "is_retryable": false], 21010),
        "21199 flagged false": (["status": 21199, "is_retryable": false], 21199),
        "21100 flag hyphenated 0": (["status": 21100, "is-retryable": "0"], 21100),
        "unknown 29999": (["status": 29999], 29999),
        "21006 without receipt": (["status": 21006], 21006),
        "HTTP 404": (["http": 404], nil),
    ] }

    @Test(arguments: permanent.keys.sorted())
    func finalAnswersAreNotRetried(_ label: String) async throws {
        let expected = try #require(Self.permanent[label])
        let simulator = try SimulatorProcess(scenario: Self.scenario(["p": ["generate": Self.answer, "faults": [expected.fault]]]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("p"))
        #expect(outcome.receiptOutcome == .failed, "\(label)")
        #expect(outcome.attempts == 1)
        #expect(outcome.requests == 1)
        #expect(outcome.finalStatus == expected.status)
    }

    /// Status 0 without a `receipt` object is a partial answer: retried like 21002, and a failure
    /// when it persists; never a verification of an account with no purchases.
    @Test func aPartialAnswerIsRetriedThenFailsNeverVerifies() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "persists": ["response": ["status": 0, "environment": "Production"]],
            "passes": ["generate": Self.answer, "faults": [["status": 0]]],
        ]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let persisting = await client.verify(receipt: receiptBlob("persists"))
        #expect(persisting.receiptOutcome == .failed)
        #expect(persisting.response == nil)
        #expect(persisting.attempts == 3)
        #expect(persisting.finalStatus == 0)
        #expect(persisting.reason?.contains("without a receipt") == true)

        let passing = await client.verify(receipt: receiptBlob("passes"))
        #expect(passing.receiptOutcome == .verified)
        #expect(passing.attempts == 2)
        #expect(passing.response?.receipt != nil)
    }

    @Test func wrongSharedSecretIs21004AndNeverShown() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario(["p": ["generate": Self.answer]]))
        let wrongSecret = "wrong-\(UUID().uuidString)"
        let client = Self.client(simulator, secret: wrongSecret)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("p"))
        #expect(outcome.finalStatus == 21004)
        #expect(outcome.attempts == 1)
        #expect(outcome.reason?.contains("shared secret") == true)
        #expect(outcome.reason?.contains(wrongSecret) == false)
        #expect("\(outcome)".contains(wrongSecret) == false)
    }

    @Test func attemptsAreBounded() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "storm": ["generate": Self.answer, "faults": [["http": 503]], "repeat_faults": true],
        ]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("storm"))
        #expect(outcome.receiptOutcome == .deferred)
        #expect(outcome.attempts == 3)
        #expect(outcome.requests == 3)
        #expect(outcome.finalStatus == nil)
        #expect(outcome.reason?.contains("503") == true)
        #expect(try await simulator.statistics()["apple_requests"] == 3)
    }

    @Test(.disabled(if: isSanitizedRun, "timing")) func retryAfterIsHonoured() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "slow down": ["generate": Self.answer, "faults": [["http": 429, "retry_after": "1"]]],
        ]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let started = ContinuousClock.now
        let outcome = await client.verify(receipt: receiptBlob("slow down"))
        let elapsed = ContinuousClock.now - started
        #expect(outcome.receiptOutcome == .verified)
        #expect(outcome.attempts == 2)
        #expect(elapsed >= .seconds(1), "waited only \(elapsed)")
    }

    @Test(.disabled(if: isSanitizedRun, "timing")) func timeoutsFire() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "hang": ["generate": Self.answer, "faults": [["delay_ms": 30_000]], "repeat_faults": true],
        ]))
        var policy = Self.fastPolicy
        policy.maximumAttempts = 2
        policy.requestTimeout = .milliseconds(300)
        let client = Self.client(simulator, policy: policy)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("hang"))
        // Had the timeout not fired, the answer would have come after 30 s: verified, one attempt.
        #expect(outcome.receiptOutcome == .deferred)
        #expect(outcome.attempts == 2)
        #expect(outcome.reason?.contains("timeout") == true)
    }

    @Test func oversizedAnswersAreRefusedNotRetried() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([
            "huge": ["generate": Self.answer, "faults": [["oversize_bytes": 2_000_000]], "repeat_faults": true],
        ]))
        var policy = Self.fastPolicy
        policy.maximumResponseBytes = 1_000_000
        let client = Self.client(simulator, policy: policy)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: receiptBlob("huge"))
        #expect(outcome.receiptOutcome == .failed)
        #expect(outcome.attempts == 1)
        #expect(outcome.reason?.contains("responseTooLarge") == true)
    }

    @Test(arguments: ["", "   \n", "not base64!", "%%%%", "QUJD*"])
    func malformedBlobsAreNeverSent(_ blob: String) async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario([:]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let outcome = await client.verify(receipt: blob)
        #expect(outcome.receiptOutcome == .invalidReceipt)
        #expect(outcome.requests == 0)
        #expect(try await simulator.statistics()["apple_requests"] == 0)
    }

    @Test func lineBreaksAndSpacesInBlobsAreTolerated() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario(["wrapped": ["generate": Self.answer]]))
        let client = Self.client(simulator)
        defer { client.gateway.shutdown() }
        let blob = receiptBlob("wrapped")
        let wrapped = blob.prefix(8) + "\r\n " + blob.dropFirst(8) + "\n"
        #expect(await client.verify(receipt: String(wrapped)).receiptOutcome == .verified)
    }

    /// 250 requests through 200 permits: the simulator answers none after the first until 200
    /// were in flight at once (`hold_until_in_flight`), so the most at once is exactly 200 by
    /// construction, however slow the machine: fewer permits would never get there (and time
    /// out), more would pass it.
    @Test func twoHundredInFlightAtOnce() async throws {
        var scenario = Self.scenario(["many": ["generate": Self.answer]])
        scenario["hold_until_in_flight"] = 200
        let simulator = try SimulatorProcess(scenario: scenario)
        // One attempt, and time enough to get 200 under way on a sanitized machine: a request
        // that timed out and was sent again would count twice at the simulator, which cannot see
        // that a held request's client has gone. Connecting counts too: libcurl starts a
        // request's connect timeout when it is added, and under the whole sanitized suite some of
        // the 200 once waited over 60 s for their connection (the simulator holds for 280 s).
        let patient = VerificationPolicy(maximumAttempts: 1, connectTimeout: .seconds(270), requestTimeout: .seconds(270))
        let client = Self.client(simulator, policy: patient, concurrency: 200)
        defer { client.gateway.shutdown() }
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0..<250 { group.addTask { await client.verify(receipt: receiptBlob("many")).receiptOutcome.rawValue } }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(outcomes.count == 250 && outcomes.allSatisfy { $0 == "verified" })
        let stats = try await simulator.statistics()
        #expect(stats["max_in_flight"] == 200, "\(stats)")
    }

    /// A second wave of 200 reuses the first wave's connections instead of opening new ones.
    @Test(.disabled(if: isSanitizedRun, "timing")) func aSecondWaveReusesTheConnections() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario(["many": ["generate": Self.answer]], latency: 1_000))
        let client = Self.client(simulator, concurrency: 200)
        defer { client.gateway.shutdown() }
        _ = await withTaskGroup(of: Void.self) { group in
            for _ in 0..<200 { group.addTask { _ = await client.verify(receipt: receiptBlob("many")) } }
        }
        _ = await withTaskGroup(of: Void.self) { group in
            for _ in 0..<200 { group.addTask { _ = await client.verify(receipt: receiptBlob("many")) } }
        }
        let after = try await simulator.statistics()
        #expect(after["connections"] ?? .max <= 202, "\(after)")  // 200, plus one for each statistics request
    }

    /// A lower bound on time only: a loaded or sanitized machine makes the run longer, never shorter.
    @Test func rateLimitSpacesRequests() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario(["paced": ["generate": Self.answer]]))
        let client = VerifyReceiptClient(
            endpoints: .init(production: simulator.productionURL, sandbox: simulator.sandboxURL), sharedSecret: Self.secret,
            policy: Self.fastPolicy, gateway: AppleGateway(concurrency: 50, requestsPerSecond: 20), logger: .quiet)
        defer { client.gateway.shutdown() }
        let started = ContinuousClock.now
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0..<21 { group.addTask { await client.verify(receipt: receiptBlob("paced")).receiptOutcome.rawValue } }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        let elapsed = ContinuousClock.now - started
        #expect(outcomes.allSatisfy { $0 == "verified" })
        // 21 requests at 20 per second: the last may start only a second after the first.
        #expect(elapsed >= .milliseconds(950), "21 requests took \(elapsed)")
    }

    @Test(.disabled(if: isSanitizedRun, "timing")) func manyCallersShareFewConnections() async throws {
        let simulator = try SimulatorProcess(scenario: Self.scenario(["few": ["generate": Self.answer]], latency: 20))
        let client = Self.client(simulator, concurrency: 200, connections: 8)
        defer { client.gateway.shutdown() }
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0..<200 { group.addTask { await client.verify(receipt: receiptBlob("few")).receiptOutcome.rawValue } }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == "verified" }.count == 200)
        let stats = try await simulator.statistics()
        #expect(stats["connections"] ?? .max <= 9, "\(stats)")  // 8, plus the statistics request itself
        #expect(stats["apple_requests"] ?? 0 >= 200)
    }
}

@Suite struct BackoffTests {
    @Test func ceilingDoublesUpToTheMaximum() {
        let backoff = Backoff(base: .milliseconds(100), maximum: .seconds(1))
        #expect(backoff.ceiling(afterAttempt: 1) == .milliseconds(100))
        #expect(backoff.ceiling(afterAttempt: 2) == .milliseconds(200))
        #expect(backoff.ceiling(afterAttempt: 3) == .milliseconds(400))
        #expect(backoff.ceiling(afterAttempt: 4) == .milliseconds(800))
        #expect(backoff.ceiling(afterAttempt: 5) == .seconds(1))
        #expect(backoff.ceiling(afterAttempt: 50) == .seconds(1))
    }

    @Test func jitteredDelaysStayUnderTheCeilingAndGrow() {
        let backoff = Backoff(base: .milliseconds(100), maximum: .seconds(10))
        let seed = FuzzSeed("jitteredDelaysStayUnderTheCeilingAndGrow")
        var generator = seed.generator
        var previousMean = Duration.zero
        for attempt in 1...5 {
            let delays = (0..<2_000).map { _ in backoff.delay(afterAttempt: attempt, using: &generator) }
            #expect(delays.allSatisfy { $0 >= .zero && $0 <= backoff.ceiling(afterAttempt: attempt) }, "\(seed)")
            let mean = delays.reduce(Duration.zero, +) / delays.count
            #expect(mean > previousMean, "attempt \(attempt); \(seed)")
            // Full jitter: the mean is about half the ceiling.
            #expect(mean > backoff.ceiling(afterAttempt: attempt) * 0.4 && mean < backoff.ceiling(afterAttempt: attempt) * 0.6, "\(seed)")
            previousMean = mean
        }
    }

    @Test func statusTable() {
        #expect(VerificationPolicy.classify(status: 0, isRetryable: nil, hasReceipt: true) == .verified)
        #expect(VerificationPolicy.classify(status: 0, isRetryable: nil, hasReceipt: false) == .retry)
        #expect(VerificationPolicy.classify(status: 21006, isRetryable: nil, hasReceipt: true) == .verified)
        #expect(VerificationPolicy.classify(status: 21006, isRetryable: nil, hasReceipt: false) == .final)
        #expect(VerificationPolicy.classify(status: 21007, isRetryable: nil, hasReceipt: false) == .redirectToSandbox)
        #expect(VerificationPolicy.classify(status: 21008, isRetryable: nil, hasReceipt: false) == .redirectToProduction)
        for status in [21002, 21005, 21009, 21100, 21150, 21199] {
            #expect(VerificationPolicy.classify(status: status, isRetryable: nil, hasReceipt: false) == .retry)
        }
        for status in [21100, 21199] {
            #expect(VerificationPolicy.classify(status: status, isRetryable: false, hasReceipt: false) == .final)
            #expect(VerificationPolicy.classify(status: status, isRetryable: true, hasReceipt: false) == .retry)
        }
        for status in [21000, 21001, 21003, 21004, 21010, 21200, 1, -1, 99999] {
            #expect(VerificationPolicy.classify(status: status, isRetryable: nil, hasReceipt: false) == .final)
        }
    }

    @Test func blobChecks() {
        #expect(ReceiptBlob.normalized("", maximumBytes: 100) == .failure(.empty))
        #expect(ReceiptBlob.normalized(" \n\t", maximumBytes: 100) == .failure(.empty))
        #expect(ReceiptBlob.normalized("abc!", maximumBytes: 100) == .failure(.notBase64))
        #expect(ReceiptBlob.normalized("QUJD\nREVG", maximumBytes: 100) == .success("QUJDREVG"))
        #expect(ReceiptBlob.normalized(String(repeating: "QUJD", count: 100), maximumBytes: 100)
            == .failure(.tooLarge(bytes: 400, limit: 100)))
    }
}

/// A storm of transient failures pauses all traffic instead of burning every receipt's attempts.
@Suite struct StormGateTests {
    @Test(.disabled(if: isSanitizedRun, "timing")) func aStormPausesAllTraffic() async throws {
        var receipts: [String: Any] = [:]
        for index in 0..<40 { receipts[receiptBlob("storm\(index)")] = ["faults": [["http": 503]], "repeat_faults": true] }
        let simulator = try SimulatorProcess(scenario: ["receipts": receipts])
        let gate = StormGate(window: 200, minimumSamples: 20, basePause: .milliseconds(400), maximumPause: .seconds(2))
        let client = VerifyReceiptClient(
            endpoints: .init(production: simulator.productionURL, sandbox: simulator.sandboxURL), sharedSecret: "s",
            policy: VerificationPolicy(maximumAttempts: 2, backoff: Backoff(base: .milliseconds(1), maximum: .milliseconds(2))),
            gateway: AppleGateway(concurrency: 40, stormGate: gate), logger: .quiet)
        defer { client.gateway.shutdown() }
        let started = ContinuousClock.now
        let outcomes = await withTaskGroup(of: String.self) { group in
            for index in 0..<40 { group.addTask { await client.verify(receipt: receiptBlob("storm\(index)")).receiptOutcome.rawValue } }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        let elapsed = ContinuousClock.now - started
        #expect(outcomes.allSatisfy { $0 == "deferred" })
        #expect(gate.pauses >= 1)
        // The second attempts waited out the pause instead of following the first ones at once.
        #expect(elapsed >= .milliseconds(400), "\(elapsed)")
    }

    @Test func successesKeepTheGateOpen() {
        let gate = StormGate(window: 10, minimumSamples: 4, basePause: .seconds(1))
        for index in 0..<100 { gate.record(transientFailure: index % 3 == 0) }
        #expect(gate.pauses == 0)
        for _ in 0..<6 { gate.record(transientFailure: true) }
        #expect(gate.pauses == 1)
    }
}

/// The HTTP client's lifetime and cancellation, against the simulator over loopback.
@Suite struct HTTPClientCancellationTests {
    /// A task cancelled while its request is being handed to the loop thread (before the
    /// transfer starts, or just after) gets `cancelled` at once, never an answer after the
    /// request's whole timeout.
    @Test(.disabled(if: isSanitizedRun, "timing")) func cancelledRequestsEndAtOnceWhenEverTheCancellationArrives() async throws {
        let simulator = try SimulatorProcess(scenario: VerifyReceiptClientTests.scenario([
            "hang": ["faults": [["delay_ms": 300_000]], "repeat_faults": true],
        ]))
        let client = HTTPClient()
        defer { client.shutdown() }
        let body = Array(#"{"receipt-data":"\#(receiptBlob("hang"))","password":"\#(VerifyReceiptClientTests.secret)"}"#.utf8)
        let request = HTTPRequest(url: simulator.productionURL, method: "POST", headers: ["Content-Type: application/json"],
                                  body: body, connectTimeout: .seconds(200), totalTimeout: .seconds(200))
        let kinds = await withTaskGroup(of: String.self) { group in
            for index in 0..<100 {
                let task = Task { () -> String in
                    do {
                        _ = try await client.execute(request)
                        return "answered"
                    } catch let error as HTTPError {
                        return "\(error.kind)"
                    } catch {
                        return "\(error)"
                    }
                }
                // Cancel at every moment of the hand-over: at once, after a yield, after a short wait.
                if index % 3 == 1 { await Task.yield() }
                if index % 3 == 2 { try? await Task.sleep(for: .milliseconds(5)) }
                task.cancel()
                group.addTask { await task.value }
            }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        // A lost cancellation would end in `timeout` after 200 s (or in an answer), never `cancelled`.
        #expect(kinds.allSatisfy { $0 == "cancelled" }, "\(Set(kinds))")
    }
}
