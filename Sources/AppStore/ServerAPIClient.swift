import AppStoreModels
import Foundation
import HTTP
import Logging
import Throttling

/// The App Store Server API (docs/apple.md, "The App Store Server API as the source"): Get Transaction History v2, followed while
/// `hasMore`, and Get All Subscription Statuses, with the API's retry policy: 429 waits for its
/// `Retry-After` (a UNIX time in milliseconds); 4040002, 4040004, 4040006, 5000001, 5000000 and
/// other 5xx are retried with the same backoff and attempts as verifyReceipt; 4040010 (not found)
/// in production goes to sandbox once, as 21007 does; 401 means the key set-up is wrong; other
/// 4xx are final. Requests share verifyReceipt's connections, `--concurrency` and `--rate-limit`,
/// and each waits for its endpoint's `ServerAPIBudget`: a 429 pauses the endpoint for every task.
///
/// What comes back is still signed: nothing of it may be used before `SignedData` verified it.
public final class ServerAPIClient: Sendable {
    public struct Endpoints: Sendable {
        public var production: String
        public var sandbox: String

        /// The hosts Apple's libraries moved to in 2026.
        public static let apple = Endpoints(production: "https://api.storekit.apple.com", sandbox: "https://api.storekit-sandbox.apple.com")

        public init(production: String, sandbox: String) {
            self.production = production
            self.sandbox = sandbox
        }

        func base(_ environment: AppleEnvironment) -> String {
            let base = environment == .production ? production : sandbox
            return base.hasSuffix("/") ? String(base.dropLast()) : base
        }
    }

    /// How an exchange ended, after every attempt.
    public enum Failure: Error, Sendable, Equatable {
        /// Apple's or the network's trouble outlasted the attempts: a later run tries again.
        case deferred(reason: String)
        /// Never sent: Apple said stop (a 401, the 21004 stop) while the request waited its turn.
        case notSent(reason: String)
        /// A final answer: Apple's `errorCode` and `errorMessage` where it gave them.
        case failed(httpStatus: Int?, errorCode: Int?, reason: String)
        /// HTTP 401: the key, its id, the issuer or the bundle id is wrong. The run stops (exit 2).
        case unauthorized(reason: String)
    }

    /// One call's result and what it took.
    public struct Outcome<Value: Sendable>: Sendable {
        public var result: Result<Value, Failure>
        public var requests = 0
        public var attempts = 0
        /// The hosts asked, in order.
        public var endpoints: [AppleEnvironment] = []
        /// Where the data was found (after a 4040010 hop, the other environment).
        public var environment: AppleEnvironment
        /// Apple answered 429 to one of its attempts.
        public var throttled = false
    }

    /// Apple's error codes worth another try.
    public static let retryableErrorCodes: Set<Int> = [4040002, 4040004, 4040006, 5000000, 5000001]
    /// Pages of one history followed at most: a hostile `hasMore` cannot loop forever.
    public static let maximumPages = 1_000

    private let endpoints: Endpoints
    private let token: ServerAPIToken
    /// The connections, limits, storm gate, stop switch and budget, shared with verifyReceipt when both ask.
    public let gateway: AppleGateway
    private let policy: VerificationPolicy
    private let logger: Logger
    /// The job's share of Apple's quota per endpoint (the gateway's); nil asks as fast as `--concurrency` lets it.
    public var budget: ServerAPIBudget? { gateway.budget }

    public init(endpoints: Endpoints, token: ServerAPIToken, gateway: AppleGateway, policy: VerificationPolicy, logger: Logger) {
        self.endpoints = endpoints
        self.token = token
        self.gateway = gateway
        self.policy = policy
        self.logger = logger
    }

    // MARK: The two calls

    /// Every signed transaction of the chain of `originalTransactionId`, page after page.
    public func transactionHistory(originalTransactionId: String, environment known: AppleEnvironment? = nil) async -> Outcome<[String]> {
        var outcome = Outcome<[String]>(result: .success([]), environment: known ?? .production)
        var hopped = false
        while true {
            var signed: [String] = []
            var revision: String?
            var hopping = false
            for _ in 0..<Self.maximumPages {
                var query = [("sort", "ASCENDING")]
                if let revision { query.append(("revision", revision)) }
                let path = "/inApps/v2/history/" + Self.pathComponent(originalTransactionId)
                switch await fetch(.history, path, query: query, outcome: &outcome, mayHop: !hopped) {
                case .hop:
                    hopping = true
                case .failure(let failure):
                    outcome.result = .failure(failure)
                    return outcome
                case .body(let body):
                    guard let page = try? TransactionHistoryResponse.decode(body) else {
                        outcome.result = .failure(.deferred(reason: "Apple's transaction history is not valid JSON (\(body.count) bytes)"))
                        return outcome
                    }
                    signed += page.signedTransactions
                    guard page.hasMore else {
                        outcome.result = .success(signed)
                        return outcome
                    }
                    guard let next = page.revision, next != revision else {
                        outcome.result = .failure(.deferred(reason: "Apple's history says hasMore without a new revision"))
                        return outcome
                    }
                    revision = next
                }
                if hopping { break }
            }
            guard hopping else {
                outcome.result = .failure(.deferred(reason: "more than \(Self.maximumPages) pages of history"))
                return outcome
            }
            hopped = true
            outcome.environment = outcome.environment == .production ? .sandbox : .production
        }
    }

    /// The last transaction and renewal info of each subscription chain of the transaction's.
    public func subscriptionStatuses(originalTransactionId: String, environment known: AppleEnvironment? = nil) async -> Outcome<SubscriptionStatusesResponse> {
        var outcome = Outcome<SubscriptionStatusesResponse>(
            result: .success(SubscriptionStatusesResponse(lastTransactions: [])), environment: known ?? .production)
        var hopped = false
        while true {
            let path = "/inApps/v1/subscriptions/" + Self.pathComponent(originalTransactionId)
            switch await fetch(.statuses, path, query: [], outcome: &outcome, mayHop: !hopped) {
            case .hop:
                hopped = true
                outcome.environment = outcome.environment == .production ? .sandbox : .production
            case .failure(let failure):
                outcome.result = .failure(failure)
                return outcome
            case .body(let body):
                guard let statuses = try? SubscriptionStatusesResponse.decode(body) else {
                    outcome.result = .failure(.deferred(reason: "Apple's subscription statuses are not valid JSON (\(body.count) bytes)"))
                    return outcome
                }
                outcome.result = .success(statuses)
                return outcome
            }
        }
    }

    /// One page of Get Notification History (`POST /inApps/v1/notifications/history`): the V2
    /// notifications Apple sent in [`start`, `end`) from `environment`'s host; `paginationToken` from
    /// the page before.
    /// `notificationType` asks Apple for that type only (answer-consumption-requests reads CONSUMPTION_REQUEST alone).
    public func notificationHistory(
        start: Date, end: Date, environment: AppleEnvironment, paginationToken: String?, notificationType: String? = nil
    ) async -> Outcome<NotificationHistoryResponse> {
        var outcome = Outcome<NotificationHistoryResponse>(
            result: .success(NotificationHistoryResponse(signedPayloads: [], hasMore: false, paginationToken: nil)), environment: environment)
        var body = Array("{\"startDate\":\(Int64(start.timeIntervalSince1970 * 1000)),\"endDate\":\(Int64(end.timeIntervalSince1970 * 1000))".utf8)
        if let notificationType {
            body += Array(",\"notificationType\":".utf8)
            JSONString.append(notificationType, to: &body)
        }
        body.append(UInt8(ascii: "}"))
        let query = paginationToken.map { [("paginationToken", $0)] } ?? []
        switch await fetch(.notificationHistory, "/inApps/v1/notifications/history", query: query, method: "POST", body: body,
                           outcome: &outcome, mayHop: false) {
        case .hop:
            outcome.result = .failure(.failed(httpStatus: nil, errorCode: nil, reason: "notification history cannot move to another host"))
        case .failure(let failure):
            outcome.result = .failure(failure)
        case .body(let body):
            if let page = try? NotificationHistoryResponse.decode(body) {
                outcome.result = .success(page)
            } else {
                outcome.result = .failure(.deferred(reason: "Apple's notification history is not valid JSON (\(body.count) bytes)"))
            }
        }
        return outcome
    }

    /// Send Consumption Information (`PUT /inApps/v2/transactions/consumption/{transactionId}`) to
    /// the host of the request's environment: success is Apple's 202. 5xx and timeouts are tried
    /// again within the attempts; a 4xx is final (`.failed`, with Apple's `errorCode`). `body` is
    /// `ConsumptionInformation.json` as recorded before sending: what leaves is what was recorded.
    /// One attempt, which leaves by `leaveBy` or not at all (`notSent`): the answer was decided,
    /// consent read, just before (`ConsumptionAnswering`), and a wait here for the gateway, the
    /// budget or a 429's pause must not carry that decision past a withdrawal or the deadline.
    public func sendConsumptionInformation(transactionId: String, environment: AppleEnvironment, body: String, leaveBy: Date) async
        -> Outcome<Void>
    {
        var outcome = Outcome<Void>(result: .success(()), environment: environment)
        let path = "/inApps/v2/transactions/consumption/" + Self.pathComponent(transactionId)
        switch await fetch(.consumption, path, query: [], method: "PUT", body: Array(body.utf8), outcome: &outcome, mayHop: false,
                           attempts: 1, leaveBy: leaveBy) {
        case .hop:
            outcome.result = .failure(.failed(httpStatus: nil, errorCode: nil, reason: "consumption information cannot move to another host"))
        case .failure(let failure):
            outcome.result = .failure(failure)
        case .body:
            outcome.result = .success(())
        }
        return outcome
    }

    /// Whether a 429 holds this endpoint now (its pause, which every request waits out).
    public func isPaused(_ endpoint: ServerAPIEndpoint, environment: AppleEnvironment) -> Bool {
        budget?.isPaused(ServerAPIBudget.Key(endpoint, environment)) ?? false
    }

    // MARK: One request, with its retries

    private enum Fetched {
        case body([UInt8])
        case hop
        case failure(Failure)
    }

    enum Verdict: Equatable {
        case body([UInt8])
        case hop
        case retry(reason: String, retryAfter: Duration?)
        /// HTTP 429: the app's quota on the endpoint ran out; the whole endpoint waits.
        case throttled(reason: String, retryAfter: Duration?)
        case final(Failure)
        /// Not sent: a 429 paused the endpoint while this request waited for its permit; it waits
        /// for the endpoint again, with no attempt spent.
        case paused
        /// Not sent: Apple said stop (`AppleStop`) while this request waited its turn.
        case stopped(reason: String)
    }

    /// GET `path` of `endpoint` from the outcome's environment, attempt after attempt.
    private func fetch<Value>(
        _ endpoint: ServerAPIEndpoint, _ path: String, query: [(String, String)], method: String = "GET", body: [UInt8] = [],
        outcome: inout Outcome<Value>, mayHop: Bool, attempts: Int? = nil, leaveBy: Date? = nil
    ) async -> Fetched {
        var policy = self.policy
        if let attempts { policy.maximumAttempts = max(1, attempts) }
        let ended: AttemptsEnded<Fetched> = await policy.attempts(logger: logger, logPrefix: "appstore") { _ in
            outcome.attempts += 1
            let key = ServerAPIBudget.Key(endpoint, outcome.environment)
            var verdict: Verdict
            repeat {
                await gateway.waitForTurn()
                await budget?.acquire(key)
                if let leaveBy, Date() > leaveBy {
                    return .done(.failure(.notSent(reason: "not sent: the wait for Apple's endpoint outlasted the answer's decision")))
                }
                verdict = await exchange(path, query: query, method: method, body: body, key: key, outcome: &outcome, mayHop: mayHop,
                                         leaveBy: leaveBy)
            } while verdict == .paused && !Task.isCancelled  // a cancelled wait returns at once: no spinning
            switch verdict {
            case .paused:
                return .done(.failure(.deferred(reason: "cancelled")))
            case .throttled(let why, let retryAfter):
                outcome.throttled = true
                // The app's quota, not this request: every task waits for the endpoint (paused in
                // `exchange` already), then this one tries again. Not a transient failure for the
                // storm gate, which would stop verifyReceipt too.
                budget?.throttled(key)
                logger.debug("appstore.throttled", metadata: ["appstore.endpoint": "\(key)", "appstore.retry_after": "\(retryAfter ?? .zero)"])
                return .retry(reason: why, retryAfter: retryAfter)
            case .retry(let why, let retryAfter):
                gateway.stormGate.record(transientFailure: true)
                return .retry(reason: why, retryAfter: retryAfter)
            case .stopped(let why):
                return .done(.failure(.notSent(reason: why)))
            case .body(let body):
                gateway.stormGate.record(transientFailure: false)
                return .done(.body(body))
            case .hop:
                gateway.stormGate.record(transientFailure: false)
                return .done(.hop)
            case .final(let failure):
                gateway.stormGate.record(transientFailure: false)
                return .done(.failure(failure))
            }
        }
        switch ended {
        case .done(let fetched): return fetched
        case .waitTooLong(let reason), .exhausted(let reason): return .failure(.deferred(reason: reason))
        case .cancelled: return .failure(.deferred(reason: "cancelled"))
        }
    }

    private func exchange<Value>(
        _ path: String, query: [(String, String)], method: String, body: [UInt8], key: ServerAPIBudget.Key, outcome: inout Outcome<Value>,
        mayHop: Bool, leaveBy: Date? = nil
    ) async -> Verdict {
        let authorization: String
        do {
            authorization = try token.authorization()
        } catch {
            return .final(.unauthorized(reason: "the API token could not be made: \(error)"))
        }
        let queryText = query.isEmpty ? "" : "?" + query.map { "\($0)=\(Self.queryValue($1))" }.joined(separator: "&")
        let request = HTTPRequest(
            url: endpoints.base(outcome.environment) + path + queryText, method: method,
            headers: ["Authorization: " + authorization, "Accept: application/json"] + (body.isEmpty ? [] : ["Content-Type: application/json"]),
            body: body,
            connectTimeout: policy.connectTimeout, totalTimeout: policy.requestTimeout, maximumResponseBytes: policy.maximumResponseBytes)
        let classified: Verdict?
        do {
            // A 429 that came back while this request waited for its permit holds it too; and this
            // answer's 429 or 401 takes effect before its permit goes to a request waiting for it.
            classified = try await gateway.send(request, mayLeave: { budget?.isPaused(key) != true && leaveBy.map { Date() <= $0 } ?? true }) {
                response in
                let verdict = Self.classify(response, environment: outcome.environment, mayHop: mayHop)
                switch verdict {
                case .final(.unauthorized(let why)): gateway.appleStop.stop(because: why)
                case .throttled(_, let retryAfter?) where retryAfter > .zero && retryAfter <= policy.maximumRetryAfter:
                    budget?.pause(key, for: retryAfter)
                default: break
                }
                return verdict
            }
        } catch let error as HTTPError {
            outcome.requests += 1
            outcome.endpoints.append(outcome.environment)
            budget?.sent(key)
            switch error.kind {
            case .timeout, .connectionFailed, .connectionLost, .other: return .retry(reason: error.description, retryAfter: nil)
            case .responseTooLarge, .tls, .cancelled: return .final(.failed(httpStatus: nil, errorCode: nil, reason: error.description))
            }
        } catch {
            return .final(.failed(httpStatus: nil, errorCode: nil, reason: "\(error)"))
        }
        guard let verdict = classified else {
            if let reason = gateway.appleStop.reason { return .stopped(reason: reason) }
            return .paused
        }
        outcome.requests += 1
        outcome.endpoints.append(outcome.environment)
        budget?.sent(key)
        return verdict
    }

    /// The table of docs/apple.md, for one answer.
    static func classify(_ response: HTTPResponse, environment: AppleEnvironment, mayHop: Bool, now: Date = Date()) -> Verdict {
        if (200...299).contains(response.status) { return .body(response.body) }  // 202 for Send Consumption Information
        let error = ServerAPIError.decode(response.body)
        let code = error?.errorCode
        let said = "HTTP \(response.status)" + (code.map { ", errorCode \($0)" } ?? "") + (error?.errorMessage.map { ": \($0)" } ?? "")
        switch (response.status, code) {
        case (401, _):
            return .final(.unauthorized(reason: "Apple refused the API token (\(said)): check APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, the key file and the bundle id"))
        case (429, _):
            return .throttled(reason: said, retryAfter: retryAfter(response.headers["retry-after"], now: now))
        case (_, 4040010?) where mayHop:
            // Not found where it was asked first: the other environment, once (a chain of an
            // account whose receipts say Sandbox can be a production purchase, and the reverse).
            return .hop
        case (_, let code?) where retryableErrorCodes.contains(code):
            return .retry(reason: said, retryAfter: nil)
        case (500...599, _):
            return .retry(reason: said, retryAfter: nil)
        default:
            return .final(.failed(httpStatus: response.status, errorCode: code, reason: said))
        }
    }

    /// The API's `Retry-After`: a UNIX time in milliseconds. A value that is no finite time, or one
    /// in the past, means "now"; one absurdly far is capped (and then not waited for).
    static func retryAfter(_ value: String?, now: Date) -> Duration? {
        guard let text = value?.trimmingCharacters(in: .whitespaces), let milliseconds = Double(text), milliseconds.isFinite else { return nil }
        let seconds = milliseconds / 1000 - now.timeIntervalSince1970
        guard seconds > 0 else { return .zero }
        return .milliseconds(Int64(min(seconds, 86_400) * 1000))
    }

    private static func pathComponent(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
    }

    private static func queryValue(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-_.~"))) ?? value
    }
}
