import Foundation
import HTTP
import Logging
import AppStoreModels
import Throttling

/// Verifies receipts with Apple's verifyReceipt endpoint as docs/apple.md, "verifyReceipt" says: production
/// first unless the environment is known, one redirect hop per attempt on 21007/21008, retries
/// with backoff for Apple's and the network's trouble, and never a request for a blob that is
/// not a receipt.
///
/// The shared secret travels only in the request body; it is never logged or put in an outcome.
public final class VerifyReceiptClient: Sendable {
    public struct Endpoints: Sendable {
        public var production: String
        public var sandbox: String

        public static let apple = Endpoints(
            production: "https://buy.itunes.apple.com/verifyReceipt",
            sandbox: "https://sandbox.itunes.apple.com/verifyReceipt")

        public init(production: String, sandbox: String) {
            self.production = production
            self.sandbox = sandbox
        }

        func url(_ environment: AppleEnvironment) -> String {
            environment == .production ? production : sandbox
        }
    }

    /// The connections, limits, storm gate and stop switch, shared with the Server API client when both ask.
    public let gateway: AppleGateway
    private let endpoints: Endpoints
    private let policy: VerificationPolicy
    /// The request's JSON around the receipt data, made once: the shared secret (escaped by
    /// JSONEncoder) and the policy do not change between requests.
    private let bodyPrefix = Array(#"{"receipt-data":""#.utf8)
    private let bodySuffix: [UInt8]
    private let logger: Logger

    public init(endpoints: Endpoints, sharedSecret: String?, policy: VerificationPolicy = VerificationPolicy(), gateway: AppleGateway, logger: Logger) {
        self.gateway = gateway
        self.endpoints = endpoints
        self.policy = policy
        let secret = sharedSecret.flatMap { try? JSONEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) } ?? "null"
        let exclude = policy.excludeOldTransactions ? "true" : "false"
        bodySuffix = Array(#"","password":\#(secret),"exclude-old-transactions":\#(exclude)}"#.utf8)
        self.logger = logger
    }

    /// Verifies one receipt. `knownEnvironment` is where it verified last time, if known.
    public func verify(receipt blob: String, knownEnvironment: AppleEnvironment? = nil) async -> VerificationOutcome {
        var outcome = VerificationOutcome(result: .deferred(reason: "not attempted"), requests: 0, attempts: 0,
                                          endpoints: [], finalStatus: nil, environment: knownEnvironment)
        let body: [UInt8]
        switch requestBody(blob) {
        case .success(let bytes): body = bytes
        case .failure(let error):
            outcome.result = .invalidReceipt(reason: error.description)
            return outcome
        }
        var environment = knownEnvironment ?? .production

        let ended: AttemptsEnded<VerificationOutcome.Result> = await policy.attempts(logger: logger, logPrefix: "apple") { attempt in
            outcome.attempts = attempt
            var hopped = false
            var verdict: Verdict
            while true {
                verdict = await exchange(body, environment: environment, outcome: &outcome)
                switch verdict {
                case .redirect(let target) where !hopped:
                    hopped = true
                    environment = target
                    outcome.environment = target
                    continue
                case .redirect:
                    verdict = .final(status: outcome.finalStatus, reason: "Apple redirected the receipt twice in one attempt (status \(outcome.finalStatus ?? 0))")
                default:
                    break
                }
                break
            }
            switch verdict {
            case .verified(let response):
                outcome.environment = AppleEnvironment(appleName: response.environment) ?? environment
                return .done(.verified(response))
            case .final(let status, let reason): return .done(.failed(status: status, reason: reason))
            case .retry(let reason, let retryAfter): return .retry(reason: reason, retryAfter: retryAfter)
            case .stopped(let reason): return .done(.notSent(reason: reason))
            case .redirect: preconditionFailure("redirects are resolved above")
            }
        }
        switch ended {
        case .done(let result): outcome.result = result
        case .waitTooLong(let reason): outcome.result = .deferred(reason: reason)
        case .cancelled(let lastReason): outcome.result = .deferred(reason: lastReason)  // the next run tries again
        case .exhausted(let reason) where outcome.finalStatus == 0:
            // A partial answer that persists is a failure, never a verification with no purchases.
            outcome.result = .failed(status: 0, reason: reason)
        case .exhausted(let reason): outcome.result = .deferred(reason: reason)
        }
        return outcome
    }

    private enum Verdict {
        indirect case verified(VerifyReceiptResponse)
        case redirect(AppleEnvironment)
        case retry(reason: String, retryAfter: Duration?)
        case final(status: Int?, reason: String)
        /// Not sent: Apple said stop (`AppleStop`) while this request waited its turn.
        case stopped(reason: String)
    }

    /// One HTTP exchange with one host, classified.
    private func exchange(_ body: [UInt8], environment: AppleEnvironment, outcome: inout VerificationOutcome) async -> Verdict {
        await gateway.waitForTurn()
        let verdict = await classifiedExchange(body, environment: environment, outcome: &outcome)
        if case .retry = verdict {
            gateway.stormGate.record(transientFailure: true)
        } else {
            gateway.stormGate.record(transientFailure: false)
        }
        return verdict
    }

    private func classifiedExchange(_ body: [UInt8], environment: AppleEnvironment, outcome: inout VerificationOutcome) async -> Verdict {
        let request = HTTPRequest(
            url: endpoints.url(environment), method: "POST",
            headers: ["Content-Type: application/json", "Accept: application/json"], body: body,
            connectTimeout: policy.connectTimeout, totalTimeout: policy.requestTimeout,
            maximumResponseBytes: policy.maximumResponseBytes)
        let sent: HTTPResponse?
        do {
            sent = try await gateway.send(request) { $0 }
        } catch let error as HTTPError {
            outcome.requests += 1
            outcome.endpoints.append(environment)
            outcome.finalStatus = nil
            switch error.kind {
            case .timeout, .connectionFailed, .connectionLost, .other:
                return .retry(reason: error.description, retryAfter: nil)
            case .responseTooLarge, .tls, .cancelled:
                return .final(status: nil, reason: error.description)
            }
        } catch {
            return .final(status: nil, reason: "\(error)")
        }
        guard let response = sent else { return .stopped(reason: gateway.appleStop.reason ?? "Apple said stop") }
        outcome.requests += 1
        outcome.endpoints.append(environment)
        return Self.verdict(on: response, outcome: &outcome)
    }

    /// What Apple's HTTP answer means. Synchronous and not inlined, so that decoding the answer
    /// takes no room in the async frame every request waiting for Apple holds.
    @inline(never)
    private static func verdict(on response: HTTPResponse, outcome: inout VerificationOutcome) -> Verdict {
        guard response.status == 200 else {
            outcome.finalStatus = nil
            if response.status == 429 || (500...599).contains(response.status) {
                return .retry(reason: "HTTP \(response.status) from Apple", retryAfter: Self.retryAfter(response.headers["retry-after"]))
            }
            return .final(status: nil, reason: "HTTP \(response.status) from Apple")
        }
        let answer: VerifyReceiptResponse
        do {
            answer = try VerifyReceiptResponse.decode(response.body)
        } catch let error as AppleJSONError where error.outOfRangeField != nil {
            // Well-formed, with a value no Apple sends: asking again gives the same answer.
            outcome.finalStatus = nil
            return .final(status: nil, reason: "Apple's answer holds a value out of range: \(error)")
        } catch {
            outcome.finalStatus = nil
            return .retry(reason: "Apple's answer is not valid JSON (\(response.body.count) bytes)", retryAfter: nil)
        }
        outcome.finalStatus = answer.status
        switch VerificationPolicy.classify(status: answer.status, isRetryable: answer.isRetryable, hasReceipt: answer.receipt != nil) {
        case .verified: return .verified(answer)
        case .redirectToSandbox: return .redirect(.sandbox)
        case .redirectToProduction: return .redirect(.production)
        case .retry where answer.status == 0:
            return .retry(reason: "Apple answered status 0 without a receipt (a partial answer)", retryAfter: nil)
        case .retry: return .retry(reason: "Apple status \(answer.status)\(answer.exception.map { " (\($0))" } ?? "")", retryAfter: nil)
        case .final: return .final(status: answer.status, reason: Self.describe(status: answer.status))
        }
    }

    /// The request's JSON for a stored blob, or why the blob is no receipt to send. Not inlined:
    /// see `verdict(on:outcome:)`.
    @inline(never)
    private func requestBody(_ blob: String) -> Swift.Result<[UInt8], ReceiptBlobError> {
        ReceiptBlob.normalized(blob, maximumBytes: policy.maximumReceiptBytes).map(requestBody(receiptData:))
    }

    /// Sized exactly: each account in flight holds its body, and appending into a growing array
    /// left up to half of each unused (18 MB of the heap's peak at C = 1,000, by heaptrack).
    private func requestBody(receiptData: String) -> [UInt8] {
        // receipt-data is plain base64 (checked by the normalization).
        var body: [UInt8] = []
        body.reserveCapacity(bodyPrefix.count + receiptData.utf8.count + bodySuffix.count)
        body.append(contentsOf: bodyPrefix)
        body.append(contentsOf: receiptData.utf8)
        body.append(contentsOf: bodySuffix)
        return body
    }

    /// `Retry-After` in seconds (the HTTP-date form is read as "soon"). A value that is no finite
    /// number is "soon" too, and one past a day is capped there (and then not waited for): a
    /// broken proxy's `inf` or `1e300` must neither trap nor stall the run.
    static func retryAfter(_ value: String?) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Double(value), seconds.isFinite, seconds >= 0 { return .milliseconds(Int64(min(seconds, 86_400) * 1000)) }
        return .seconds(1)
    }

    /// Apple's meaning of the final statuses, for reports.
    public static func describe(status: Int) -> String {
        switch status {
        case 21100...21199: "\(status): \(AppleCodes.verifyReceiptStatus(status)) (retry flag false)"
        default: "\(status): \(AppleCodes.verifyReceiptStatus(status))"
        }
    }
}
