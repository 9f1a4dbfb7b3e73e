import AppStore
import AppStoreModels
import Foundation
import Reconciliation
import Storage

/// One of Apple's sources, as a run asks it: verify an account. verifyReceipt is the first; the
/// App Store Server API slots in beside it. What comes back is the same for every source (an
/// outcome per receipt row, and Apple's facts in the rules' terms), so the rules, the diff, the
/// writer and the reports do not know which source spoke.
protocol AppleAccountSource: Sendable {
    var source: AppleSource { get }
    /// Verifies the account's receipts: one verification per stored receipt, in their order, and
    /// what the source noticed on the way.
    func verify(_ work: AccountWork) async -> SourceAnswer
}

/// What a source found of one account.
struct SourceAnswer: Sendable {
    var verifications: [ReceiptVerification]
    /// A line per bundle id that is not this app's (verifyReceipt reads one from the receipt and
    /// from Apple's answer; signed data of another bundle fails its verification instead).
    var bundleMismatches: [String] = []
    /// `--source both`: where the sources disagreed, whether the other one failed where the
    /// authority verified, and the other one's requests (made too, so counted).
    var disagreements: [Disagreement] = []
    var otherSourceFailed = false
    var otherSourceRequests = 0
    /// `--source both` with verifyReceipt the authority: Apple's signed money terms the Server API
    /// gave, by transaction id. The ledger and the journal keep them (a price, its currency, a
    /// refund's share), though the entitlements follow the authority.
    var otherSignedTerms: [String: SignedTerms] = [:]
}

/// What a source found of one stored receipt.
struct ReceiptVerification: Sendable {
    var receipt: StoredReceipt
    /// The receipt's local decode; nil when it is no receipt the decoder reads.
    var local: ReceiptIdentifiers?
    /// How the verification ended: what the receipt row and the report record.
    var outcome: VerificationOutcome
    /// Apple's facts, when it verified.
    var facts: VerifiedFacts?
    /// A fresher receipt Apple gave, to store in place of the old one.
    var freshReceipt: String?
}

/// verifyReceipt: each receipt sent as it is stored, unless its local decode already shows it
/// cannot count; Apple's answer held to the app's bundle ids and to what PostgreSQL can store.
struct VerifyReceiptSource: AppleAccountSource {
    let client: VerifyReceiptClient
    let options: RunOptions
    /// Told each answer's status as it comes, not when the account is done: its 21004 stop holds
    /// the account's other receipts too.
    let secretGuard: SharedSecretGuard
    var source: AppleSource { .verifyReceipt }

    func verify(_ work: AccountWork) async -> SourceAnswer {
        var answer = SourceAnswer(verifications: [])
        for receipt in work.receipts {
            if let bytes = receipt.oversizeBytes {
                // Refused unread: neither decoded nor sent (memory stays bounded, whatever is stored).
                let reason = "the receipt is \(bytes) bytes, more than the \(options.policy.maximumReceiptBytes) a receipt may have"
                answer.verifications.append(ReceiptVerification(
                    receipt: receipt, outcome: VerificationOutcome(result: .invalidReceipt(reason: reason), environment: receipt.environment)))
                continue
            }
            let local = Self.localDecode(receipt)
            let outcome = await verify(receipt, local: local, accountId: work.accountId, mismatches: &answer.bundleMismatches)
            secretGuard.note(outcome.finalStatus)
            answer.verifications.append(Self.verification(of: receipt, local: local, outcome: outcome))
        }
        return answer
    }

    /// A receipt's verification with the facts of Apple's answer. Synchronous and not inlined, as
    /// is `localDecode`: work inlined into an async function can widen the frame that each of the
    /// 1.25 × C accounts in flight holds while it waits for Apple.
    @inline(never)
    static func verification(of receipt: StoredReceipt, local: ReceiptIdentifiers?, outcome: VerificationOutcome) -> ReceiptVerification {
        var verification = ReceiptVerification(receipt: receipt, local: local, outcome: outcome)
        if case .verified(let response) = outcome.result {
            let environment = outcome.environment ?? AppleEnvironment(appleName: response.environment) ?? .production
            verification.facts = VerifiedFacts(receiptId: receipt.id, response: response, environment: environment)
            verification.freshReceipt = response.latestReceipt
        }
        return verification
    }

    /// What the local decode of a stored receipt says (it informs the report and the bundle check;
    /// it never grants): the decode a run stored for this very blob, else the blob decoded now;
    /// nil for a blob too large to read or no receipt this decoder reads.
    @inline(never)
    static func localDecode(_ receipt: StoredReceipt) -> ReceiptIdentifiers? {
        guard receipt.oversizeBytes == nil else { return nil }
        return receipt.storedLocalDecode ?? (try? ReceiptDecoder.identifiers(Array(receipt.latestReceipt.utf8)))
    }

    /// Asks Apple about one receipt, unless the local decode already shows it cannot count, and
    /// holds the answer to the app's bundle ids and to what PostgreSQL can store.
    private func verify(_ receipt: StoredReceipt, local: ReceiptIdentifiers?, accountId: String,
                        mismatches: inout [String]) async -> VerificationOutcome {
        if let refused = refusal(of: receipt, local: local, accountId: accountId, mismatches: &mismatches) { return refused }
        let outcome = await client.verify(receipt: receipt.latestReceipt, knownEnvironment: receipt.environment)
        return held(outcome, receipt: receipt, accountId: accountId, mismatches: &mismatches)
    }

    /// Why the local decode shows the receipt cannot count, if it does. (This and `held` are
    /// synchronous and not inlined, for the async frame's size: see `verification(of:local:outcome:)`.)
    @inline(never)
    private func refusal(of receipt: StoredReceipt, local: ReceiptIdentifiers?, accountId: String,
                         mismatches: inout [String]) -> VerificationOutcome? {
        var outcome = VerificationOutcome(result: .deferred(reason: "not attempted"), environment: receipt.environment)
        if let bundle = local?.bundleId, let result = foreign(bundle, source: "the receipt", receipt: receipt, accountId: accountId, mismatches: &mismatches) {
            outcome.result = result
            return outcome
        }
        if let local, let problem = StorableValues.problem(in: local) {
            outcome.result = .failed(status: nil, reason: "the receipt's local decode cannot be stored: \(problem)")
            return outcome
        }
        return nil
    }

    /// Apple's answer held to the app's bundle ids and to what PostgreSQL can store.
    @inline(never)
    private func held(_ outcome: VerificationOutcome, receipt: StoredReceipt, accountId: String,
                      mismatches: inout [String]) -> VerificationOutcome {
        guard case .verified(let response) = outcome.result else { return outcome }
        var outcome = outcome
        if let bundle = response.receipt?.bundleId,
           let result = foreign(bundle, source: "Apple's answer", receipt: receipt, accountId: accountId, mismatches: &mismatches) {
            outcome.result = result
        } else if let problem = StorableValues.problem(in: response) {
            outcome.result = .failed(status: outcome.finalStatus, reason: "Apple's answer cannot be stored: \(problem)")
        }
        return outcome
    }

    /// A bundle id that is not this app's (the run's `--bundle-id`s, else the receipt row's).
    private func foreign(_ bundle: String, source: String, receipt: StoredReceipt, accountId: String,
                         mismatches: inout [String]) -> VerificationOutcome.Result? {
        let expected = options.bundleIds.isEmpty ? Set([receipt.bundleId].compactMap { $0 }.filter { !$0.isEmpty }) : options.bundleIds
        guard !expected.isEmpty, !expected.contains(bundle) else { return nil }
        let shown = StorableValues.problem(text: bundle, field: "") == nil ? bundle : "a bundle id with a NUL byte"
        let reason = "\(source) names the bundle \(shown), not this app's (\(expected.sorted().joined(separator: ", ")))"
        mismatches.append("account \(accountId), receipt \(receipt.id): \(reason)")
        return .foreignBundle(reason: reason)
    }
}

/// `--source both`: each account verified by both sources; the authority's answer is what the
/// run applies, and every disagreement between the two is reported. An account the other
/// source failed for is still corrected from the authority's answer.
struct BothSources: AppleAccountSource {
    let verifyReceipt: VerifyReceiptSource
    let serverAPI: ServerAPISource
    let authority: AppleSource
    let rules: EntitlementRules
    /// The run's clock, for comparing the entitlements each source implies.
    let now: Date
    var source: AppleSource { authority }

    func verify(_ work: AccountWork) async -> SourceAnswer {
        let byVerifyReceipt = await verifyReceipt.verify(work)
        let known = EntitlementRules.union(byVerifyReceipt.verifications.compactMap(\.facts)).map(\.originalTransactionId)
        let byServerAPI = await serverAPI.verify(work, knownOriginals: known, decoded: byVerifyReceipt.verifications.map(\.local))
        let (chosen, other) = authority == .serverAPI ? (byServerAPI, byVerifyReceipt.verifications) : (byVerifyReceipt.verifications, byServerAPI)
        var answer = SourceAnswer(verifications: chosen, bundleMismatches: byVerifyReceipt.bundleMismatches)
        answer.otherSourceRequests = other.reduce(0) { $0 + $1.outcome.requests }
        if authority == .verifyReceipt {
            for facts in byServerAPI.compactMap(\.facts) { answer.otherSignedTerms.merge(facts.signedTerms) { first, _ in first } }
        }
        if let left = Self.facts(byVerifyReceipt.verifications), let right = Self.facts(byServerAPI) {
            answer.disagreements = SourceComparison.disagreements(
                accountId: work.accountId, verifyReceipt: left, serverAPI: right, rules: rules, now: now)
        } else if Self.facts(chosen) != nil {
            answer.otherSourceFailed = true
        }
        return answer
    }

    /// A source's facts when every receipt of the account verified; otherwise nothing to compare.
    private static func facts(_ verifications: [ReceiptVerification]) -> [VerifiedFacts]? {
        guard verifications.allSatisfy({ $0.outcome.receiptOutcome == .verified }) else { return nil }
        return verifications.compactMap(\.facts)
    }
}
