import AppStoreModels
import Crypto
import Foundation
import HTTP
import Logging
import SignedData
import Testing
import TestSupport
import Throttling
@testable import AppStore

/// The App Store Server API client against the real simulator over loopback, and its token.
@Suite struct ServerAPIClientTests {
    static let signingDirectory = FileManager.default.temporaryDirectory.appending(path: "rr-signing-\(UUID().uuidString)")
    /// Fast to retry, patient to answer: these tests count attempts, so no attempt may time out by
    /// accident on a loaded, sanitized machine (as VerifyReceiptClientTests.fastPolicy).
    static let policy = VerificationPolicy(
        maximumAttempts: 3, backoff: Backoff(base: .milliseconds(5), maximum: .milliseconds(20)),
        connectTimeout: .seconds(60), requestTimeout: .seconds(60))

    static func credentials() throws -> ServerAPICredentials {
        let pem = String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/certs/testSigningKey.p8"), as: UTF8.self)
        return try ServerAPICredentials(issuerId: "issuer-1", keyId: "KEY123", bundleId: "com.example.app", privateKeyPEM: pem)
    }

    /// A simulator serving `chains`, and a client of it with a gateway of its own: no verifyReceipt client.
    static func world(_ chains: [String: [String: Any]], unauthorized: Bool = false) throws -> (SimulatorProcess, ServerAPIClient, AppleGateway) {
        let simulator = try SimulatorProcess(
            scenario: ["api": ["chains": chains, "unauthorized": unauthorized]], arguments: ["--signing-dir", signingDirectory.path])
        let base = "http://127.0.0.1:\(simulator.port)"
        let gateway = AppleGateway(concurrency: 8)
        let client = ServerAPIClient(
            endpoints: .init(production: base, sandbox: base + "/sandbox"), token: ServerAPIToken(credentials: try credentials()),
            gateway: gateway, policy: policy, logger: .quiet)
        return (simulator, client, gateway)
    }

    static func transactions(_ count: Int, original: String = "2000000000000001") -> [[String: Any]] {
        let month: Int64 = 2_592_000_000
        let start: Int64 = 1_700_000_000_000
        return (0..<count).map { index -> [String: Any] in
            let id: String = index == 0 ? original : original + String(format: "%03d", index)
            let purchased: Int64 = start + Int64(index) * month
            return ["transactionId": id, "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
                    "purchaseDate": purchased, "expiresDate": purchased + month]
        }
    }

    static func verifier() throws -> SignedDataVerifier {
        let root = Array(try Data(contentsOf: signingDirectory.appending(path: "root.der")))
        return try SignedDataVerifier(configuration: .init(trustedRoots: [root], bundleIds: ["com.example.app"]))
    }

    @Test func aLongHistoryIsFollowedPageByPageAndVerifies() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": ["environment": "Production", "page_size": 2, "transactions": Self.transactions(5)]])
        defer { shared.shutdown(); simulator.stop() }
        let outcome = await client.transactionHistory(originalTransactionId: "2000000000000001")
        let signed = try outcome.result.get()
        #expect(signed.count == 5)
        #expect(outcome.requests == 3)  // pages of 2, 2 and 1
        #expect(outcome.environment == .production)
        let verifier = try Self.verifier()
        var ids: [String] = []
        for jws in signed { ids.append(try await verifier.verify(jws, as: JWSTransaction.self, environment: .host(.production)).transactionId) }
        #expect(ids == Self.transactions(5).map { $0["transactionId"] as! String })
    }

    @Test func rateLimitsAndRetryableErrorsAreRetried() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": [
            "environment": "Production", "transactions": Self.transactions(1),
            "faults": [["http": 429, "error_code": 4290000, "retry_after_ms": 200], ["http": 500, "error_code": 5000001]],
        ]])
        defer { shared.shutdown(); simulator.stop() }
        let outcome = await client.transactionHistory(originalTransactionId: "2000000000000001")
        #expect(try outcome.result.get().count == 1)
        #expect(outcome.attempts == 3 && outcome.requests == 3)
    }

    @Test func aTransactionUnknownInProductionIsAskedOfSandboxOnce() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": ["environment": "Sandbox", "transactions": Self.transactions(2)]])
        defer { shared.shutdown(); simulator.stop() }
        let outcome = await client.transactionHistory(originalTransactionId: "2000000000000001")
        #expect(try outcome.result.get().count == 2)
        #expect(outcome.endpoints == [.production, .sandbox])
        #expect(outcome.environment == .sandbox)
        // Unknown everywhere: one hop, then a final failure naming Apple's error code.
        let missing = await client.transactionHistory(originalTransactionId: "999")
        #expect(missing.endpoints == [.production, .sandbox])
        guard case .failure(.failed(let status, let code, _)) = missing.result else { Issue.record("expected a final failure"); return }
        #expect(status == 404 && code == 4040010)
    }

    /// An account whose receipts say Sandbox (a TestFlight chain read first) can hold a production
    /// purchase: asked in the sandbox first, it is found in production (once), never lost for good.
    @Test func aTransactionUnknownInTheSandboxIsAskedOfProductionOnce() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": ["environment": "Production", "transactions": Self.transactions(2)]])
        defer { shared.shutdown(); simulator.stop() }
        let outcome = await client.transactionHistory(originalTransactionId: "2000000000000001", environment: .sandbox)
        #expect(try outcome.result.get().count == 2)
        #expect(outcome.endpoints == [.sandbox, .production])
        #expect(outcome.environment == .production)
        let statuses = await client.subscriptionStatuses(originalTransactionId: "2000000000000001", environment: .sandbox)
        #expect(statuses.endpoints == [.sandbox, .production])
        #expect(statuses.environment == .production)
    }

    @Test func aRefusedTokenIsUnauthorized() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": ["transactions": Self.transactions(1)]], unauthorized: true)
        defer { shared.shutdown(); simulator.stop() }
        let outcome = await client.subscriptionStatuses(originalTransactionId: "2000000000000001")
        guard case .failure(.unauthorized(let reason)) = outcome.result else { Issue.record("expected unauthorized"); return }
        #expect(reason.contains("APPSTORE_KEY_ID"))
        #expect(outcome.attempts == 1)  // never retried
    }

    /// `count` chains of one subscription each, ids 2000000000000100 and on.
    static func chains(_ count: Int) -> [String: [String: Any]] {
        Dictionary(uniqueKeysWithValues: (0..<count).map { index in
            let id = String(2_000_000_000_000_100 + index)
            return (id, ["environment": "Production", "transactions": Self.transactions(1, original: id)] as [String: Any])
        })
    }

    /// Issue 32: a 429 holds every request not yet sent, also those that already hold a budget
    /// token and wait for a concurrency permit: the pause is checked again just before a request
    /// leaves. 30 histories at once through 4 permits, with tokens for all (a budget of 500 a
    /// second); Apple allows 6 a 5-second window (windows counted from the first request) and
    /// answers in 200 ms. Counted in the simulator's own windows, not by wall-clock gaps: with
    /// the pause, a window refuses at most the 4 that were on the wire when its first 429 came
    /// back, however slow the machine; without it, the tasks holding tokens go on through the
    /// permits, 4 every 200 ms, and are refused one after another until the window ends.
    @Test func a429HoldsEveryRequestNotYetSentUntilRetryAfter() async throws {
        let concurrency = 4
        let window: Int64 = 5_000
        let simulator = try SimulatorProcess(
            scenario: ["api": ["chains": Self.chains(30)], "api_quota": ["window_seconds": 5, "production": ["history": 1.2]], "latency_ms": 200],
            arguments: ["--signing-dir", Self.signingDirectory.path])
        let gateway = AppleGateway(
            concurrency: concurrency, budget: ServerAPIBudget(quota: ServerAPIQuota(production: [.history: 1000], sandbox: [:]), share: 0.5))
        defer { gateway.shutdown(); simulator.stop() }
        var policy = Self.policy
        policy.maximumAttempts = 20
        let client = ServerAPIClient(
            endpoints: .init(production: simulator.apiURL, sandbox: simulator.sandboxAPIURL), token: ServerAPIToken(credentials: try Self.credentials()),
            gateway: gateway, policy: policy, logger: .quiet)
        let verified = await withTaskGroup(of: Bool.self) { group in
            for id in Self.chains(30).keys {
                group.addTask { (try? await client.transactionHistory(originalTransactionId: id).result.get().count) == 1 }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(verified == 30)
        let traffic = try await simulator.apiStatistics()
        let history = try #require(traffic["history/Production"])
        #expect(history.throttled >= 1, "the quota must have been hit for the test to mean anything")
        let first = try #require(traffic.values.flatMap { $0.arrivals + $0.throttledAt }.min())
        let refusedByWindow = Dictionary(grouping: history.throttledAt) { ($0 - first) / window }
        #expect(refusedByWindow.values.allSatisfy { $0.count <= concurrency }, "429s by window: \(refusedByWindow.sorted { $0.key < $1.key })")
        #expect(client.budget?.usage[ServerAPIBudget.Key(.history, .production)]?.requests == history.requests + history.throttled)
    }

    /// Issue 32: a 401 means the key is wrong for every request; none still waiting for a permit
    /// is sent. 24 calls at once through 4 permits: Apple sees the 4 on the wire, not 24.
    @Test func a401CancelsEveryRequestNotYetSent() async throws {
        let simulator = try SimulatorProcess(
            scenario: ["api": ["chains": Self.chains(24), "unauthorized": true], "latency_ms": 100],
            arguments: ["--signing-dir", Self.signingDirectory.path])
        let gateway = AppleGateway(concurrency: 4)
        defer { gateway.shutdown(); simulator.stop() }
        let client = ServerAPIClient(
            endpoints: .init(production: simulator.apiURL, sandbox: simulator.sandboxAPIURL), token: ServerAPIToken(credentials: try Self.credentials()),
            gateway: gateway, policy: Self.policy, logger: .quiet)
        let outcomes = await withTaskGroup(of: ServerAPIClient.Outcome<[String]>.self) { group in
            for id in Self.chains(24).keys { group.addTask { await client.transactionHistory(originalTransactionId: id) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let unauthorized = outcomes.filter { if case .failure(.unauthorized) = $0.result { true } else { false } }
        let notSent = outcomes.filter { if case .failure(.notSent) = $0.result { true } else { false } }
        let sent = try await simulator.statistics()["http_requests"].map { $0 - 1 }  // less the statistics request itself
        #expect(sent == outcomes.map(\.requests).reduce(0, +))
        #expect((1...5).contains(sent ?? 0), "\(sent ?? 0) requests reached Apple after the key was refused")
        #expect(unauthorized.count == sent && unauthorized.count + notSent.count == 24)
        #expect(gateway.appleStop.reason?.contains("APPSTORE_KEY_ID") == true)
    }

    @Test func otherClientErrorsAreFinalWithApplesCode() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": [
            "transactions": Self.transactions(1), "faults": [["http": 400, "error_code": 4000006]],
        ]])
        defer { shared.shutdown(); simulator.stop() }
        let outcome = await client.transactionHistory(originalTransactionId: "2000000000000001")
        guard case .failure(.failed(400, 4000006, let reason)) = outcome.result else { Issue.record("expected final 4000006"); return }
        #expect(reason.contains("errorCode 4000006"))
        #expect(outcome.attempts == 1)
    }

    @Test func subscriptionStatusesCarryTheLastTransactionAndRenewalInfo() async throws {
        let (simulator, client, shared) = try Self.world(["2000000000000001": [
            "environment": "Production", "status": 2, "transactions": Self.transactions(3),
            "renewal": ["autoRenewStatus": 0, "autoRenewProductId": "pro.monthly", "expirationIntent": 1],
        ]])
        defer { shared.shutdown(); simulator.stop() }
        let statuses = try await client.subscriptionStatuses(originalTransactionId: "2000000000000001").result.get()
        let last = try #require(statuses.lastTransactions.first)
        #expect(last.status == 2 && last.originalTransactionId == "2000000000000001")
        let verifier = try Self.verifier()
        let transaction = try await verifier.verify(try #require(last.signedTransactionInfo), as: JWSTransaction.self, environment: .host(.production))
        #expect(transaction.transactionId == "2000000000000001002")
        let renewal = try await verifier.verify(try #require(last.signedRenewalInfo), as: JWSRenewalInfo.self, environment: .host(.production))
        #expect(renewal.autoRenewStatus == .off && renewal.expirationIntent == .customerCancelled)
    }

    // MARK: The token

    @Test func theTokenIsAnES256JWTForAppStoreConnectRenewedBeforeItExpires() throws {
        let credentials = try Self.credentials()
        let token = ServerAPIToken(credentials: credentials)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try token.authorization(now: now)
        #expect(first.hasPrefix("Bearer "))
        let parts = first.dropFirst("Bearer ".count).split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(Array(parts[0].utf8))))) as! [String: Any]
        let claims = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(Array(parts[1].utf8))))) as! [String: Any]
        #expect(header["alg"] as? String == "ES256" && header["kid"] as? String == "KEY123" && header["typ"] as? String == "JWT")
        #expect(claims["iss"] as? String == "issuer-1" && claims["aud"] as? String == "appstoreconnect-v1" && claims["bid"] as? String == "com.example.app")
        let issued = try #require(claims["iat"] as? Int), expires = try #require(claims["exp"] as? Int)
        #expect(issued == 1_800_000_000 && expires - issued == 20 * 60)
        // Signed with the key: its public half verifies the signature.
        let pem = String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/certs/testSigningKey.p8"), as: UTF8.self)
        let publicKey = try P256.Signing.PrivateKey(pemRepresentation: pem).publicKey
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(Array(parts[2].utf8))))
        #expect(publicKey.isValidSignature(signature, for: Array((parts[0] + "." + parts[1]).utf8)))
        // Made once: the same token until it nears its expiry, then a new one.
        #expect(try token.authorization(now: now.addingTimeInterval(60)) == first)
        #expect(try token.authorization(now: now.addingTimeInterval(ServerAPIToken.lifetime - ServerAPIToken.renewalMargin + 1)) != first)
    }

    @Test func theKeyNeverShows() throws {
        let credentials = try Self.credentials()
        let pem = String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/certs/testSigningKey.p8"), as: UTF8.self)
        let keyLine = try #require(pem.split(separator: "\n").dropFirst().first)
        #expect(!"\(credentials)".contains(keyLine))
        #expect(!String(reflecting: credentials).contains(keyLine))
        do {
            _ = try ServerAPICredentials(issuerId: "i", keyId: "k", bundleId: "b", privateKeyPEM: "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ1dC1icm9rZW4=\n-----END PRIVATE KEY-----")
            Issue.record("a broken key was accepted")
        } catch {
            #expect(!"\(error)".contains("c2VjcmV0"))
        }
    }

    static let retryAfters: [(String?, Duration?)] = [
        (nil, nil), ("soon", nil), ("inf", nil), ("nan", nil), ("1e300", .seconds(86_400)), ("0", .zero),
        ("1800000001500", .milliseconds(1500)),
    ]

    @Test(arguments: retryAfters)
    func retryAfterIsAUnixTimeInMillisecondsAndNeverUnbounded(value: String?, expected: Duration?) {
        #expect(ServerAPIClient.retryAfter(value, now: Date(timeIntervalSince1970: 1_800_000_000)) == expected)
    }
}

/// The verifyReceipt client's `Retry-After` (seconds) and the HTTP layer's timeouts: odd values
/// neither trap nor wait without end.
@Suite struct OddValueTests {
    static let retryAfters: [(String?, Duration?)] = [
        (nil, nil), ("", nil), ("2", .seconds(2)), ("0.5", .milliseconds(500)), ("inf", .seconds(1)), ("nan", .seconds(1)),
        ("1e300", .seconds(86_400)), ("-5", .seconds(1)), ("Wed, 21 Oct 2026 07:28:00 GMT", .seconds(1)),
    ]

    @Test(arguments: retryAfters)
    func verifyReceiptRetryAfter(value: String?, expected: Duration?) {
        #expect(VerifyReceiptClient.retryAfter(value) == expected)
    }

    /// libcurl reads a zero timeout as "no limit": the client never hands it one.
    @Test func aZeroTimeoutStillTimesOut() async throws {
        let simulator = try SimulatorProcess(scenario: ["receipts": [receiptBlob("slow"): ["faults": [["delay_ms": 5000]], "repeat_faults": true]]])
        defer { simulator.stop() }
        let http = HTTPClient()
        defer { http.shutdown() }
        let request = HTTPRequest(
            url: simulator.productionURL, method: "POST", headers: ["Content-Type: application/json"],
            body: Array(#"{"receipt-data":"\#(receiptBlob("slow"))"}"#.utf8), connectTimeout: .zero, totalTimeout: .zero,
            maximumResponseBytes: 1 << 20)
        do {
            let response = try await http.execute(request)
            Issue.record("answered after the 5 s delay (HTTP \(response.status)): the zero timeout meant no limit")
        } catch {
            #expect(error.kind == .timeout)
        }
    }
}
