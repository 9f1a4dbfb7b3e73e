import AppStoreModels
import Foundation

/// How verifying one receipt ended, after every attempt and redirect.
public struct VerificationOutcome: Sendable {
    public enum Result: Sendable {
        /// Apple answered 0 (or 21006 with a receipt): the answer is the truth for this receipt.
        indirect case verified(VerifyReceiptResponse)
        /// The App Store Server API's signed data for the receipt's account verified.
        case verifiedSignedData
        /// Apple's or the network's trouble outlasted the attempts: try again in a later run.
        case deferred(reason: String)
        /// Never sent: Apple said stop (a 401, the 21004 stop) while the request waited its turn.
        /// Not an attempt: the receipt is due again at once. A receipt outcome of `deferred`.
        case notSent(reason: String)
        /// A final answer that is not a verification: the receipt's fault, the secret's, or an
        /// unknown status. `status` is Apple's when one came back.
        case failed(status: Int?, reason: String)
        /// The blob is not a receipt at all (empty, not base64, too large): it was never sent.
        case invalidReceipt(reason: String)
        /// The receipt is another app's (Apple's answer or the local decode names another bundle
        /// id): a failure for its account, which must never be granted this app's products.
        case foreignBundle(reason: String)
        /// The receipt's account stopped the process three times in a row: set aside unread, a
        /// failure for its account until it is released.
        case quarantined(reason: String)
    }

    public var result: Result
    /// HTTP exchanges made, redirects included.
    public var requests: Int
    /// Attempts made (a redirect hop belongs to the attempt it happened in).
    public var attempts: Int
    /// The hosts asked, in order.
    public var endpoints: [AppleEnvironment]
    /// Apple's status in the final answer of the last attempt, after any hop; nil when none came back.
    public var finalStatus: Int?
    /// Where the receipt verified, or where Apple said it belongs (learned from 21007/21008).
    public var environment: AppleEnvironment?

    public init(result: Result, requests: Int = 0, attempts: Int = 0, endpoints: [AppleEnvironment] = [],
                finalStatus: Int? = nil, environment: AppleEnvironment? = nil) {
        self.result = result
        self.requests = requests
        self.attempts = attempts
        self.endpoints = endpoints
        self.finalStatus = finalStatus
        self.environment = environment
    }

    public var receiptOutcome: ReceiptOutcome {
        switch result {
        case .verified, .verifiedSignedData: .verified
        case .deferred, .notSent: .deferred
        case .failed: .failed
        case .invalidReceipt: .invalidReceipt
        case .foreignBundle: .foreignBundle
        case .quarantined: .quarantined
        }
    }

    public var reason: String? {
        switch result {
        case .verified, .verifiedSignedData: nil
        case .deferred(let reason), .failed(_, let reason), .invalidReceipt(let reason), .foreignBundle(let reason),
             .quarantined(let reason): reason
        case .notSent(let reason): "not sent: " + reason
        }
    }

    public var response: VerifyReceiptResponse? {
        if case .verified(let response) = result { return response }
        return nil
    }
}
