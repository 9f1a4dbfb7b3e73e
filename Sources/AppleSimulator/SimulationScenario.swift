import Foundation

/// The simulator's script, read from a JSON file:
///
///     {
///       "shared_secret": "s3cret",        // requests with another password get 21004
///       "latency_ms": 50,                  // added to every request
///       "hold_until_in_flight": 200,       // no answer after the first until 200 were in flight at once
///       "receipts": {
///         "<base64 receipt-data>": {
///           "environment": "Production",   // or "Sandbox": the other host answers 21007/21008
///           "response_file": "answers/a.json",  // or "response": { ...Apple's JSON... } or "generate": {...}
///           "faults": [{"status": 21199, "is_retryable": true}, {"http": 503, "retry_after": "1"},
///                      {"drop": true}, {"truncate": true}, {"delay_ms": 3000}, {"garbage": true},
///                      {"oversize_bytes": 20000000}],
///           "repeat_faults": false         // true: the faults cycle forever
///         }
///       }
///     }
///
/// Faults apply to the receipt's first attempts in order; later attempts get the answer.
public struct SimulationScenario: Sendable {
    public var sharedSecret: String?
    public var latencyMilliseconds: Int
    /// `"hold_until_in_flight": N`: no answer after the first until N requests were in flight at once.
    public var holdUntilInFlight: Int?
    /// `"hold_after_requests": N`: verifyReceipt answers the first N requests, then holds every
    /// later one until `POST /__release` or `POST /__hold/N` (or two minutes): a run that cannot
    /// end before the test has done what it waits to do, however slow the machine.
    public var holdAfterRequests: Int?
    public var receipts: [String: SimulatedReceipt]
    /// The Server API's world: original transaction id -> its chain.
    public var apiChains: [String: SimulatedAPIChain] = [:]
    /// Every API request answers 401 (a wrong key set-up).
    public var apiUnauthorized = false
    /// Apple's rate limits, enforced (`api_quota`); nil: none.
    public var apiQuota: SimulatedAPIQuota?
    /// Get Notification History's world (`api.notifications`): V2 notification specs, as
    /// `sign-notifications` reads them, signed at start; served by signedDate, in pages.
    public var apiNotifications: [[UInt8]] = []
    public var apiNotificationPageSize = 20
    /// Random faults on Get Notification History (`api.notification_history_faults`).
    public var notificationHistoryFaults: NotificationHistoryFaults?
    /// Send Consumption Information's world (`api.consumption`): `types` (transaction id -> Apple's
    /// product type, where the API chains do not say) and `faults` (transaction id -> the scripted
    /// answers of its first attempts, as a chain's `faults`).
    public var consumptionTypes: [String: String] = [:]
    public var consumptionFaults: [String: [SimulatedAPIFault]] = [:]

    public init(sharedSecret: String? = nil, latencyMilliseconds: Int = 0, receipts: [String: SimulatedReceipt] = [:]) {
        self.sharedSecret = sharedSecret
        self.latencyMilliseconds = latencyMilliseconds
        self.receipts = receipts
    }

    /// Reads a scenario file; `response_file` paths are relative to the file's directory.
    public init(contentsOf url: URL) throws {
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: url))
        guard let root = object as? [String: Any] else { throw SimulatorError("\(url.path): the scenario must be a JSON object") }
        sharedSecret = root["shared_secret"] as? String
        latencyMilliseconds = root["latency_ms"] as? Int ?? 0
        holdUntilInFlight = root["hold_until_in_flight"] as? Int
        holdAfterRequests = root["hold_after_requests"] as? Int
        var receipts: [String: SimulatedReceipt] = [:]
        for (key, value) in root["receipts"] as? [String: Any] ?? [:] {
            guard let spec = value as? [String: Any] else { throw SimulatorError("receipt \(key.prefix(16))…: not an object") }
            receipts[key.filter { !$0.isWhitespace }] = try SimulatedReceipt(spec: spec, baseDirectory: url.deletingLastPathComponent())
        }
        self.receipts = receipts
        let api = root["api"] as? [String: Any] ?? [:]
        apiUnauthorized = api["unauthorized"] as? Bool ?? false
        apiQuota = try (root["api_quota"] as? [String: Any]).map(SimulatedAPIQuota.init(spec:))
        apiNotifications = try (api["notifications"] as? [[String: Any]] ?? []).map { Array(try JSONSerialization.data(withJSONObject: $0)) }
        apiNotificationPageSize = max(1, api["notification_page_size"] as? Int ?? 20)
        if let generated = api["generated_notifications"] as? [String: Any] {
            apiNotifications += try Self.generatedNotifications(generated)
        }
        notificationHistoryFaults = try (api["notification_history_faults"] as? [String: Any]).map(NotificationHistoryFaults.init(spec:))
        let consumption = api["consumption"] as? [String: Any] ?? [:]
        consumptionTypes = consumption["types"] as? [String: String] ?? [:]
        consumptionFaults = try (consumption["faults"] as? [String: [[String: Any]]] ?? [:]).mapValues { try $0.map(SimulatedAPIFault.init) }
        let derived = try SimulatedAPIChain.chains(
            fromReceipts: api["from_receipts"] as? [String] ?? [], disagreements: api["disagreements"] as? [String: [String: Any]] ?? [:],
            productTypes: api["product_types"] as? [String: String] ?? [:], signedTerms: api["signed_terms"] as? [String: [String: Any]] ?? [:])
        apiChains.merge(derived) { $1 }
        for (original, value) in api["chains"] as? [String: Any] ?? [:] {
            guard let spec = value as? [String: Any] else { throw SimulatorError("api chain \(original): not an object") }
            apiChains[original] = try SimulatedAPIChain(spec: spec)
        }
    }
}

/// One scripted fault.
public enum SimulatedFault: Sendable, Equatable {
    /// Apple's answer with this status (and the retry flag, in the given spelling, when set).
    case status(Int, isRetryable: Bool?, spelling: String)
    /// An HTTP error page with this code (and `Retry-After` when set).
    case http(Int, retryAfter: String?)
    case drop, truncate, garbage
    case delay(milliseconds: Int)
    case oversize(bytes: Int)

    init(_ spec: [String: Any]) throws {
        if let status = spec["status"] as? Int {
            if let flag = spec["is-retryable"] {
                self = .status(status, isRetryable: Self.flag(flag), spelling: "is-retryable")
            } else {
                self = .status(status, isRetryable: spec["is_retryable"].map(Self.flag), spelling: "is_retryable")
            }
        } else if let code = spec["http"] as? Int {
            self = .http(code, retryAfter: spec["retry_after"].map { "\($0)" })
        } else if spec["drop"] != nil {
            self = .drop
        } else if spec["truncate"] != nil {
            self = .truncate
        } else if spec["garbage"] != nil {
            self = .garbage
        } else if let milliseconds = spec["delay_ms"] as? Int {
            self = .delay(milliseconds: milliseconds)
        } else if let bytes = spec["oversize_bytes"] as? Int {
            self = .oversize(bytes: bytes)
        } else {
            throw SimulatorError("unknown fault \(spec.keys.sorted())")
        }
    }

    private static func flag(_ value: Any) -> Bool {
        if let bool = value as? Bool { return bool }
        if let number = value as? Int { return number != 0 }
        return "\(value)" == "true" || "\(value)" == "1"
    }
}

/// What the simulator knows about one receipt.
public struct SimulatedReceipt: Sendable {
    public var environment: String
    public var faults: [SimulatedFault]
    public var repeatFaults: Bool
    /// A fixed answer body (from `response` or `response_file`).
    public var response: [UInt8]?
    /// Otherwise, the answer is generated from this.
    var generation: AnswerGeneration?

    /// Parses a synthetic receipt's embedded spec.
    /// From the second night on (`POST /__night/2`), a spec's `night2` members replace its own:
    /// the benchmark's accounts renewed or refunded between two nights.
    init(json: Data, night: Int = 1) throws {
        guard var spec = try JSONSerialization.jsonObject(with: json) as? [String: Any] else {
            throw SimulatorError("a synthetic receipt's spec must be a JSON object")
        }
        if night >= 2, let changes = spec["night2"] as? [String: Any] { spec.merge(changes) { $1 } }
        try self.init(spec: spec, baseDirectory: nil)
    }

    init(spec: [String: Any], baseDirectory: URL?) throws {
        environment = spec["environment"] as? String ?? "Production"
        faults = try (spec["faults"] as? [[String: Any]] ?? []).map(SimulatedFault.init)
        repeatFaults = spec["repeat_faults"] as? Bool ?? false
        if let inline = spec["response"] {
            response = Array(try JSONSerialization.data(withJSONObject: inline))
        } else if let file = spec["response_file"] as? String, let baseDirectory {
            let url = file.hasPrefix("/") ? URL(filePath: file) : baseDirectory.appending(path: file)
            response = Array(try Data(contentsOf: url))
        } else if let generate = spec["generate"] as? [String: Any] {
            generation = try AnswerGeneration(generate)
        }
        if response == nil && generation == nil {
            generation = try AnswerGeneration([:])
        }
    }

    /// The answer body for a request that reached the right host.
    func answer(receiptData: String, environment: String, excludeOldTransactions: Bool) throws -> [UInt8] {
        if let response { return response }
        return try (generation ?? AnswerGeneration([:])).answer(
            receiptData: receiptData, environment: environment, excludeOldTransactions: excludeOldTransactions)
    }
}
