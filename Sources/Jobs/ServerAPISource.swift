import AppStore
import AppStoreModels
import Foundation
import Reconciliation
import SignedData
import Storage

/// The App Store Server API as a source (`--source server-api`, docs/apple.md, "The App Store Server API as the source"): the
/// account's original transaction ids, from its ledger (as its last verification left it), its
/// stored entitlements and the local decode of its receipts (Apple's own migration path), each
/// asked for its transaction history and its subscription statuses; every signed transaction and
/// renewal info verified before use. The
/// account verifies as a whole: every receipt row records the same outcome, and the facts come
/// once, with the first.
struct ServerAPISource: AppleAccountSource {
    let client: ServerAPIClient
    let verifier: SignedDataVerifier
    let options: RunOptions
    let secretGuard: SharedSecretGuard
    var source: AppleSource { .serverAPI }

    func verify(_ work: AccountWork) async -> SourceAnswer {
        SourceAnswer(verifications: await verify(work, knownOriginals: [], decoded: nil))
    }

    /// The same, also asking for `knownOriginals` (what verifyReceipt just said of the account,
    /// with `--source both`: chains bought since the entitlements were last written). `decoded`,
    /// when given, is the local decode of each receipt in order, already made (the decode is the
    /// largest CPU cost of an account: it is not made twice).
    func verify(
        _ work: AccountWork, knownOriginals: [String], decoded: [ReceiptIdentifiers?]?
    ) async -> [ReceiptVerification] {
        var receipts: [(StoredReceipt, ReceiptIdentifiers?)] = []
        var originals: [String] = work.stored.map(\.originalTransactionId) + knownOriginals
        for (index, receipt) in work.receipts.enumerated() {
            let local = decoded.map { $0[index] } ?? VerifyReceiptSource.localDecode(receipt)
            receipts.append((receipt, local))
            originals += receipt.knownOriginalTransactionIds + (local?.originalTransactionIds ?? [])
        }
        var seen = Set<String>()
        originals = originals.filter { !$0.isEmpty && seen.insert($0).inserted }
        let known = work.receipts.compactMap(\.environment).first
        var outcome = VerificationOutcome(result: .verifiedSignedData, environment: known)
        var facts: VerifiedFacts?
        if originals.isEmpty {
            outcome.result = .failed(status: nil, reason: "no transaction id is known for this account: neither its entitlements nor its receipts name one")
        } else {
            switch await verifyAccount(originals, known: known, outcome: &outcome) {
            case .facts(let verified): facts = verified
            case .not(let failure): outcome.result = failure
            }
        }
        return receipts.enumerated().map { index, pair in
            var each = outcome
            // One account, one set of requests: counted once.
            if index > 0 { (each.requests, each.attempts) = (0, 0) }
            return ReceiptVerification(receipt: pair.0, local: pair.1, outcome: each, facts: index == 0 ? facts : nil)
        }
    }

    /// Get Transaction History answers with the customer's whole history for the app from any one
    /// of its ids, so it is asked once per customer: the originals an answer covered are not asked
    /// again, only those it did not (an account holding purchases of two Apple IDs). Get All
    /// Subscription Statuses, also the customer's whole, is asked once per history answer that
    /// holds an auto-renewable subscription, and never for one that holds none.
    private func verifyAccount(
        _ originals: [String], known: AppleEnvironment?, outcome: inout VerificationOutcome
    ) async -> Verified {
        var transactions: [String: JWSTransaction] = [:]
        var renewals: [JWSRenewalInfo] = []
        var environment = known ?? .production
        var environments: [String: AppleEnvironment] = [:]
        var renewalEnvironments: [String: AppleEnvironment] = [:]
        var covered = Set<String>()
        for original in originals where !covered.contains(original) {
            covered.insert(original)
            let history = await client.transactionHistory(originalTransactionId: original, environment: known)
            note(history, into: &outcome)
            // Each signed transaction and renewal info keeps its own environment (its signed one,
            // else the answer's it came in): a production chain read after a sandbox one stays
            // production. The account's (what its receipt rows record, and where the next run asks
            // first) is production when any chain answered from there: asked there first, a
            // sandbox chain hops to the sandbox, but a production one asked in the sandbox would not.
            if environments.isEmpty || history.environment == .production { environment = history.environment }
            var subscription: String?
            switch history.result {
            case .failure(let failure): return .not(result(failure))
            case .success(let signed):
                for jws in signed {
                    do {
                        let transaction = try await verifier.verify(jws, as: JWSTransaction.self, environment: .host(history.environment))
                        transactions[transaction.transactionId] = transaction
                        environments[transaction.transactionId] = transaction.environment ?? history.environment
                        let chain = transaction.originalTransactionId ?? transaction.transactionId
                        covered.insert(chain)
                        if subscription == nil, Self.isAutoRenewable(transaction) { subscription = chain }
                    } catch {
                        return .not(.failed(status: nil, reason: "a signed transaction of \(original): \(error.reason)"))
                    }
                }
            }
            guard let subscription else { continue }
            let statuses = await client.subscriptionStatuses(originalTransactionId: subscription, environment: history.environment)
            note(statuses, into: &outcome)
            switch statuses.result {
            case .failure(let failure): return .not(result(failure))
            case .success(let answer):
                for last in answer.lastTransactions {
                    guard let signed = last.signedRenewalInfo else { continue }
                    do {
                        let info = try await verifier.verify(signed, as: JWSRenewalInfo.self, environment: .host(statuses.environment))
                        renewals.append(info)
                        if let chain = info.originalTransactionId { renewalEnvironments[chain] = info.environment ?? statuses.environment }
                    } catch {
                        return .not(.failed(status: nil, reason: "a signed renewal info of \(subscription): \(error.reason)"))
                    }
                }
            }
        }
        outcome.environment = environment
        var facts = VerifiedFacts(
            receiptId: nil, signedTransactions: transactions.values.sorted { $0.transactionId < $1.transactionId },
            renewalInfos: renewals, environment: environment)
        facts.transactionEnvironments = environments.filter { $0.value != environment }
        facts.renewalEnvironments = renewalEnvironments.filter { $0.value != environment }
        return .facts(facts)
    }

    /// Apple's `type`; a transaction signed without one (2021) is a subscription when it expires.
    static func isAutoRenewable(_ transaction: JWSTransaction) -> Bool {
        transaction.rawType.map { $0 == SignedProductType.autoRenewable.rawValue } ?? (transaction.expiresDate != nil)
    }

    private enum Verified {
        case facts(VerifiedFacts)
        case not(VerificationOutcome.Result)
    }

    private func note<Value>(_ call: ServerAPIClient.Outcome<Value>, into outcome: inout VerificationOutcome) {
        outcome.requests += call.requests
        outcome.attempts += call.attempts
        outcome.endpoints += call.endpoints
    }

    /// The API's failure as a receipt outcome; 401 also stops the run (exit 2), as 21004 does.
    private func result(_ failure: ServerAPIClient.Failure) -> VerificationOutcome.Result {
        switch failure {
        case .deferred(let reason): return .deferred(reason: reason)
        case .notSent(let reason): return .notSent(reason: reason)
        case .failed(_, let code, let reason): return .failed(status: code, reason: reason)
        case .unauthorized(let reason):
            secretGuard.noteUnauthorized(reason)
            return .failed(status: nil, reason: reason)
        }
    }
}
