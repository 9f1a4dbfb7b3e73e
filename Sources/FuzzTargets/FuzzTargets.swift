import AppStoreModels
import CivilCalendar
import AppleSimulator
import CFuzzDriver
import CommandLineValues
import Dispatch
import Foundation
import Inspection
import Reconciliation
import SignedData

/// The fuzz targets: one for every parser of untrusted bytes (docs/guarantees.md, "Hostile input"). Each takes
/// any bytes, and must return, never trap, leak or hang; what it returns does not matter.
enum FuzzTarget: String, CaseIterable {
    /// An app receipt (PKCS#7 + ASN.1, base64 or DER) or an iOS 6 transaction receipt.
    case receipt
    /// A verifyReceipt answer, then the rules and the diff over what it says.
    case verifyReceipt = "verify-receipt"
    /// Compact JWS (or a V2 body) as stored or sent: every check, as each payload type.
    case jws
    /// A payload's JSON signed by the test chain, so that a mutant passes the signature and
    /// reaches the payload's decoding, the claims and the entitlement rules.
    case jwsSigned = "jws-signed"
    /// The App Store Server API's bodies: history, statuses, notification history, errors.
    case serverAPI = "server-api"
    /// A v1 server notification body.
    case notificationV1 = "notification-v1"
    /// `inspect` as a whole: whatever a file holds, its table and its JSON.
    case inspect
    /// Display escaping and CSV cells (formula-safe and raw).
    case display
    /// Command-line values: durations, dates, rates, shards, quota overrides, Apple's URLs.
    case commandLine = "command-line"

    func run(_ bytes: [UInt8]) {
        switch self {
        case .receipt: Targets.receipt(bytes)
        case .verifyReceipt: Targets.verifyReceipt(bytes)
        case .jws: Targets.jws(bytes)
        case .jwsSigned: Targets.jwsSigned(bytes)
        case .serverAPI: Targets.serverAPI(bytes)
        case .notificationV1: Targets.notificationV1(bytes)
        case .inspect: Targets.inspect(bytes)
        case .display: Targets.display(bytes)
        case .commandLine: Targets.commandLine(bytes)
        }
    }
}

enum Targets {
    static let now = Date(timeIntervalSince1970: 1_764_000_000)
    /// The simulator's own chain: payloads signed with it verify, as Apple's would.
    static let chain = try? SigningChain.create()
    static let verifier = try? SignedDataVerifier(configuration: .init(
        trustedRoots: [AppleRootCertificates.appleRootCAG3] + (chain.map { [$0.root] } ?? []), bundleIds: ["com.example.app"], appAppleId: 1234))

    static func receipt(_ bytes: [UInt8]) {
        guard let decoded = try? ReceiptDecoder.decode(bytes) else { return }
        _ = ReceiptInspection.table(decoded)
        _ = ReceiptInspection.json(decoded)
    }

    static func verifyReceipt(_ bytes: [UInt8]) {
        guard let response = try? VerifyReceiptResponse.decode(bytes) else { return }
        rules([VerifiedFacts(receiptId: 1, response: response, environment: .production)])
    }

    /// The rules and the diff over verified facts, against nothing stored and against themselves.
    static func rules(_ facts: [VerifiedFacts]) {
        for policy in SandboxPolicy.allCases {
            let rules = EntitlementRules(sandboxPolicy: policy)
            let union = EntitlementRules.union(facts)
            let computed = rules.entitlements(accountId: "fuzz", receipts: facts, union: union, now: now)
            let reasons = EntitlementRules.cancellationReasons(union)
            let diff = EntitlementDiff()
            _ = diff.corrections(stored: [], computed: computed, now: now, cancellationReasons: reasons)
            _ = diff.corrections(stored: computed, computed: [], now: now, cancellationReasons: reasons)
        }
    }

    static func jws(_ bytes: [UInt8]) {
        guard let verifier else { return }
        let text = String(decoding: bytes, as: UTF8.self)
        _ = UnverifiedPayload(bytes)
        blocking {
            _ = await verifier.examineNotification(signedPayload: text)
            _ = await verifier.examine(text, as: JWSTransaction.self, environment: .either)
            _ = await verifier.examine(text, as: JWSRenewalInfo.self, environment: .host(.sandbox))
        }
    }

    static func jwsSigned(_ bytes: [UInt8]) {
        guard let verifier, let chain, let signed = try? chain.sign(bytes) else { return }
        blocking {
            var transactions: [JWSTransaction] = []
            var renewals: [JWSRenewalInfo] = []
            if let transaction = try? await verifier.verify(signed, as: JWSTransaction.self, environment: .either) { transactions.append(transaction) }
            if let renewal = try? await verifier.verify(signed, as: JWSRenewalInfo.self, environment: .either) { renewals.append(renewal) }
            if let notification = try? await verifier.verifyNotification(signedPayload: signed) {
                if let transaction = notification.transaction { transactions.append(transaction) }
                if let renewal = notification.renewalInfo { renewals.append(renewal) }
            }
            guard !transactions.isEmpty || !renewals.isEmpty else { return }
            rules([VerifiedFacts(receiptId: nil, signedTransactions: transactions, renewalInfos: renewals, environment: .production)])
        }
    }

    static func serverAPI(_ bytes: [UInt8]) {
        _ = try? TransactionHistoryResponse.decode(bytes)
        _ = try? SubscriptionStatusesResponse.decode(bytes)
        _ = try? NotificationHistoryResponse.decode(bytes)
        _ = ServerAPIError.decode(bytes)
    }

    /// A stored body as ingestion and a run read it: v1 decoded; of V2, only what is read unverified.
    static func notificationV1(_ bytes: [UInt8]) {
        _ = try? ServerNotification.decode(bytes)
        _ = NotificationV2Body.signedPayload(bytes)
        _ = NotificationV2Body.unverifiedNotificationUUID(bytes)
    }

    static func inspect(_ bytes: [UInt8]) {
        if let signed = SignedDataInspection.signedData(in: bytes), let verifier {
            blocking {
                let inspection = await SignedDataInspection.inspect(signed, verifier: verifier)
                _ = inspection.text()
                _ = inspection.json()
            }
        } else {
            receipt(bytes)
        }
    }

    static func display(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = DisplayText.escaped(text)
        let cells = text.split(separator: "\u{1F}", omittingEmptySubsequences: false).map { String($0) as String? }
        _ = CSV.row(cells, formulaSafe: true)
        _ = CSV.row(cells, formulaSafe: false)
    }

    static func commandLine(_ bytes: [UInt8]) {
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
            let argument = String(line)
            if let length = TimeLength(argument: argument) {
                _ = length.duration
                _ = length.defaultValueDescription
            }
            _ = APIQuotaOverride(argument: argument)
            _ = Shard(argument: argument)
            if let date = CommandLineTime.parse(argument) { _ = Timestamp.format(date) }
            try? AppleURL.check(argument, name: "url")
        }
    }
}

/// Runs `body` to its end from the fuzzer's own thread (not the cooperative pool's): the verifier
/// is async, libFuzzer's callback is not.
func blocking(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task {
        await body()
        done.signal()
    }
    done.wait()
}

/// Set once in `main`, before the fuzzer calls back; read only after.
nonisolated(unsafe) var selectedTarget: FuzzTarget = .receipt

/// SwiftPM names an executable's entry point `<module>_main`; with no top-level code here
/// (built `-parse-as-library` for libFuzzer) this is it. Under libFuzzer it fuzzes the target
/// named by `RR_FUZZ_TARGET`; in an ordinary build it replays the files (or folders) it is given,
/// once each, which is how the suite keeps every input that ever crashed as a regression case.
@_cdecl("receipt_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
    guard let name = ProcessInfo.processInfo.environment["RR_FUZZ_TARGET"], let target = FuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("set RR_FUZZ_TARGET to one of: \(names)\n".utf8))
        return 2
    }
    selectedTarget = target
    // Made before the first input, so that the leak check, which counts what an input allocated
    // and did not free, never counts the verifier's and the chain's one-time set-up.
    _ = Targets.verifier
    _ = Targets.chain
    if rr_libfuzzer_available() != 0 {
        var count = argc
        var arguments = argv
        return rr_libfuzzer_run(&count, &arguments) { data, size in
            selectedTarget.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
            return 0
        }
    }
    var replayed = 0
    for path in CommandLine.arguments.dropFirst() where !path.hasPrefix("-") {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            FileHandle.standardError.write(Data("no such input: \(path)\n".utf8))
            return 2
        }
        let files = isDirectory.boolValue
            ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 } : [path]
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            target.run(Array(data))
            replayed += 1
        }
    }
    print("\(target.rawValue): replayed \(replayed) input(s), none crashed")
    return 0
}
