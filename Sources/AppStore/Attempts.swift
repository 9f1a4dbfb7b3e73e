import Logging
import Throttling

/// What one attempt at an exchange with Apple decided.
enum AttemptVerdict<Done> {
    /// Finished, well or badly: no more attempts.
    case done(Done)
    /// Apple's or the network's trouble: worth another attempt after the backoff, or after
    /// Apple's `Retry-After` when that is longer.
    case retry(reason: String, retryAfter: Duration?)
}

/// How a series of attempts ended.
enum AttemptsEnded<Done> {
    case done(Done)
    /// Every attempt asked for another; `reason` says why, with the count.
    case exhausted(reason: String)
    /// Apple asked to wait longer than `maximumRetryAfter`: the run does not wait.
    case waitTooLong(reason: String)
    /// The task was cancelled while it waited between attempts; `lastReason` is the last retry's.
    case cancelled(lastReason: String)
}

extension VerificationPolicy {
    /// The one retry loop of both Apple clients (verifyReceipt and the App Store Server API):
    /// up to `maximumAttempts`, waiting `max(Retry-After, backoff)` between them, and never
    /// longer than `maximumRetryAfter`. `attempt` gets the attempt's number, from 1.
    /// `logPrefix` names the client in the debug log (`apple`, `appstore`).
    func attempts<Done>(
        logger: Logger, logPrefix: String, _ attempt: (Int) async -> AttemptVerdict<Done>
    ) async -> AttemptsEnded<Done> {
        var reason = "not attempted"
        for number in 1...maximumAttempts {
            switch await attempt(number) {
            case .done(let done):
                return .done(done)
            case .retry(let why, let retryAfter):
                reason = why
                guard number < maximumAttempts else { break }
                if let retryAfter, retryAfter > maximumRetryAfter {
                    return .waitTooLong(reason: why + "; Apple asked to wait \(retryAfter), longer than this run waits")
                }
                let delay = max(retryAfter ?? .zero, backoff.delay(afterAttempt: number))
                logger.debug("\(logPrefix).retry", metadata: [
                    "\(logPrefix).attempt": "\(number)", "\(logPrefix).reason": "\(why)", "\(logPrefix).delay": "\(delay)",
                ])
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    return .cancelled(lastReason: why)
                }
            }
        }
        return .exhausted(reason: "\(reason) (after \(maximumAttempts) attempts)")
    }
}
