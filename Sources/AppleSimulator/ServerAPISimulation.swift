import AppStoreModels
import Foundation
import Locking

/// One subscription or purchase chain as the simulated Server API knows it (scenario `api.chains`):
///
///     "2000000000000001": {
///       "environment": "Sandbox", "bundle_id": "com.example.app", "page_size": 2, "status": 1,
///       "transactions": [{"transactionId": "...", "productId": "...", "purchaseDate": 1700000000000, ...}],
///       "renewal": {"autoRenewStatus": 1, "autoRenewProductId": "..."},
///       "faults": [{"http": 429, "retry_after_ms": 1500}, {"http": 500, "error_code": 5000001}]
///     }
///
/// Payloads are Apple's decoded JSON; the simulator fills `originalTransactionId`, `bundleId`,
/// `environment` and `signedDate` where a payload leaves them out, and signs them.
///
/// Chains that name the same `"customer"` are one Apple ID's purchases: as Apple does, Get
/// Transaction History and Get All Subscription Statuses asked with any id of one of them answer
/// with all of them. A chain that names none is a customer of its own; the chains derived from
/// one receipt (`from_receipts`) are one customer.
///
/// `@unchecked Sendable`: for its `[String: Any]` payloads, which hold only what
/// `JSONSerialization` makes (strings, numbers, arrays, dictionaries: immutable values). The
/// simulator sets every field in `init` and only reads them after.
public struct SimulatedAPIChain: @unchecked Sendable {
    public var customer: String?
    public var environment: String
    public var bundleId: String
    public var pageSize: Int
    public var status: Int
    public var transactions: [[String: Any]]
    public var renewal: [String: Any]?
    public var faults: [SimulatedAPIFault]

    init(spec: [String: Any]) throws {
        customer = spec["customer"] as? String
        environment = spec["environment"] as? String ?? "Production"
        bundleId = spec["bundle_id"] as? String ?? "com.example.app"
        pageSize = max(1, spec["page_size"] as? Int ?? 20)
        status = spec["status"] as? Int ?? 1
        transactions = spec["transactions"] as? [[String: Any]] ?? []
        renewal = spec["renewal"] as? [String: Any]
        faults = try (spec["faults"] as? [[String: Any]] ?? []).map(SimulatedAPIFault.init)
    }
}

/// One scripted fault of the API: an HTTP status, with Apple's error code, or `Retry-After`.
public struct SimulatedAPIFault: Sendable, Equatable {
    public var http: Int
    public var errorCode: Int?
    /// Milliseconds from now, sent as the UNIX time in milliseconds the API uses.
    public var retryAfterMilliseconds: Int?

    init(_ spec: [String: Any]) throws {
        guard let http = spec["http"] as? Int else { throw SimulatorError("an api fault needs \"http\"") }
        self.http = http
        errorCode = spec["error_code"] as? Int
        retryAfterMilliseconds = spec["retry_after_ms"] as? Int
    }
}

extension AppleSimulator {
    /// `GET [/sandbox]/inApps/v2/history/{id}[?revision=N]` and `GET [/sandbox]/inApps/v1/subscriptions/{id}`.
    func handleServerAPI(method: String, target: String, body: [UInt8], authorization: String?) -> SimulatedReply {
        let sandbox = target.hasPrefix("/sandbox/")
        let endpoint = sandbox ? "Sandbox" : "Production"
        let (path, query) = Self.split(target: sandbox ? String(target.dropFirst("/sandbox".count)) : target)
        guard let chain = signingChain else { return Self.apiError(404, 4040000, "the simulator serves no API without a signing chain") }
        if scenario.apiUnauthorized || !Self.isWellFormedToken(authorization) {
            return .respond(status: 401, body: [])
        }
        let parts = path.split(separator: "/").map(String.init)
        if parts == ["inApps", "v1", "notifications", "history"] {
            guard method == "POST" else { return Self.apiError(405, 4050000, "method not allowed") }
            return notificationHistory(environment: endpoint, token: query["paginationToken"], body: body)
        }
        if parts.count == 5, parts[0...3] == ["inApps", "v2", "transactions", "consumption"], let id = parts[4].removingPercentEncoding {
            guard method == "PUT" else { return Self.apiError(405, 4050000, "method not allowed") }
            return consumption(transactionId: id, environment: endpoint, body: body)
        }
        guard method == "GET" else { return Self.apiError(405, 4050000, "method not allowed") }
        guard parts.count == 4, parts[0] == "inApps", let id = parts[3].removingPercentEncoding else {
            return Self.apiError(404, 4040000, "not found")
        }
        let kind: String
        switch (parts[1], parts[2]) {
        case ("v2", "history"): kind = "history"
        case ("v1", "subscriptions"): kind = "subscriptions"
        default: return Self.apiError(404, 4040000, "not found")
        }
        // A chain is found by its original transaction id, or by any of its transactions' ids.
        guard let original = apiWorld.chainKey[id], let known = scenario.apiChains[original] else {
            return Self.apiError(404, 4040010, "Transaction id not found.")
        }
        if let retryAfter = apiTraffic.admit(kind == "history" ? "history" : "statuses", environment: endpoint) {
            return Self.rateLimited(retryAfter: retryAfter)
        }
        if let fault = scriptedFault(known.faults, counter: "api:\(kind):\(original)") { return fault.reply }
        guard known.environment == endpoint else { return Self.apiError(404, 4040010, "Transaction id not found.") }
        // The customer's chains (one Apple ID's purchases in this environment), the found one first.
        let customer = [original] + apiWorld.customerChains(of: original).filter {
            $0 != original && scenario.apiChains[$0]?.environment == endpoint
        }
        do {
            return kind == "history"
                ? .respond(status: 200, body: try history(customer, pageSize: known.pageSize, revision: query["revision"], chain: chain))
                : .respond(status: 200, body: try statuses(customer, chain: chain))
        } catch {
            return .respond(status: 500, body: Array("simulator: \(error)".utf8))
        }
    }

    /// The customer's whole history for the app, oldest purchase first, in pages.
    private func history(_ customer: [String], pageSize: Int, revision: String?, chain: SigningChain) throws -> [UInt8] {
        let all = customer.flatMap { original in
            (scenario.apiChains[original]?.transactions ?? []).map { (original: original, payload: $0) }
        }.sorted {
            let (left, right) = ($0.payload["purchaseDate"] as? Int64 ?? 0, $1.payload["purchaseDate"] as? Int64 ?? 0)
            return left != right ? left < right : ($0.payload["transactionId"] as? String ?? "") < ($1.payload["transactionId"] as? String ?? "")
        }
        let known = scenario.apiChains[customer[0]]!
        let start = revision.flatMap { Int($0.dropFirst("page-".count)) } ?? 0
        let page = Array(all.dropFirst(start).prefix(pageSize))
        let next = start + page.count
        var body: [String: Any] = [
            "bundleId": known.bundleId, "environment": known.environment, "hasMore": next < all.count, "revision": "page-\(next)",
            "signedTransactions": try page.map { try sign($0.payload, scenario.apiChains[$0.original]!, original: $0.original, chain: chain, isTransaction: true) },
        ]
        if known.environment == "Production" { body["appAppleId"] = 1234567890 }
        return Self.json(body)
    }

    /// The last transaction and renewal info of each of the customer's subscriptions, by group.
    private func statuses(_ customer: [String], chain: SigningChain) throws -> [UInt8] {
        var groups: [String: [[String: Any]]] = [:]
        for original in customer {
            guard let known = scenario.apiChains[original] else { continue }
            let latest = known.transactions.max { ($0["purchaseDate"] as? Int64 ?? 0) < ($1["purchaseDate"] as? Int64 ?? 0) }
            // Only subscriptions have a status (the chain asked about always answers, as before customers).
            guard original == customer[0] || known.renewal != nil || latest?["expiresDate"] != nil else { continue }
            var last: [String: Any] = ["originalTransactionId": original, "status": known.status]
            if let latest { last["signedTransactionInfo"] = try sign(latest, known, original: original, chain: chain, isTransaction: true) }
            if let renewal = known.renewal { last["signedRenewalInfo"] = try sign(renewal, known, original: original, chain: chain, isTransaction: false) }
            groups[latest?["subscriptionGroupIdentifier"] as? String ?? "group", default: []].append(last)
        }
        let known = scenario.apiChains[customer[0]]!
        return Self.json([
            "bundleId": known.bundleId, "environment": known.environment,
            "data": groups.sorted { $0.key < $1.key }.map { ["subscriptionGroupIdentifier": $0.key, "lastTransactions": $0.value] },
        ])
    }

    private func sign(_ payload: [String: Any], _ known: SimulatedAPIChain, original: String, chain: SigningChain, isTransaction: Bool) throws -> String {
        var payload = payload
        if payload["originalTransactionId"] == nil { payload["originalTransactionId"] = original }
        if payload["environment"] == nil { payload["environment"] = known.environment }
        if payload["signedDate"] == nil { payload["signedDate"] = Int64(Date().timeIntervalSince1970 * 1000) }
        if isTransaction && payload["bundleId"] == nil { payload["bundleId"] = known.bundleId }
        return try chain.sign(Array(JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys, .withoutEscapingSlashes])))
    }

    /// What Apple checks of a token before anything else: an ES256 JWT for App Store Connect,
    /// with a key id, an app, and at most an hour of life. (The signature needs the team's public
    /// key, which the simulator does not have.)
    static func isWellFormedToken(_ authorization: String?) -> Bool {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return false }
        let parts = authorization.dropFirst("Bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(Array(parts[0].utf8)), let claimBytes = Base64URL.decode(Array(parts[1].utf8)),
              let signature = Base64URL.decode(Array(parts[2].utf8)), signature.count == 64,
              let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any],
              let claims = try? JSONSerialization.jsonObject(with: Data(claimBytes)) as? [String: Any],
              header["alg"] as? String == "ES256", header["typ"] as? String == "JWT", header["kid"] is String,
              claims["aud"] as? String == "appstoreconnect-v1", claims["iss"] is String, claims["bid"] is String,
              let issued = claims["iat"] as? Int64, let expires = claims["exp"] as? Int64
        else { return false }
        let now = Int64(Date().timeIntervalSince1970)
        return expires > now && expires - issued <= 3600 && issued <= now + 60
    }

    /// Apple's 429 when the quota of an endpoint ran out: `Retry-After` in UNIX milliseconds.
    static func rateLimited(retryAfter: Int64) -> SimulatedReply {
        .respond(status: 429, headers: ["Retry-After": String(retryAfter)], body: json(["errorCode": 4290000, "errorMessage": "Rate limit exceeded."]))
    }

    /// The scripted fault for this attempt (the `counter`th), with its reply: Apple's error body and
    /// `Retry-After` (UNIX milliseconds) where the fault names them; nil once the faults are spent.
    func scriptedFault(_ faults: [SimulatedAPIFault], counter: String) -> (fault: SimulatedAPIFault, reply: SimulatedReply)? {
        guard !faults.isEmpty else { return nil }
        let attempt = attempts.withLock { counts in
            counts[counter, default: 0] += 1
            return counts[counter]!
        }
        guard attempt <= faults.count else { return nil }
        let fault = faults[attempt - 1]
        var headers: [String: String] = [:]
        if let wait = fault.retryAfterMilliseconds { headers["Retry-After"] = String(Int64(Date().timeIntervalSince1970 * 1000) + Int64(wait)) }
        let body = fault.errorCode.map { Self.json(["errorCode": $0, "errorMessage": "simulated"]) } ?? []
        return (fault, .respond(status: fault.http, headers: headers, body: body))
    }

    static func apiError(_ status: Int, _ code: Int, _ message: String) -> SimulatedReply {
        .respond(status: status, body: json(["errorCode": code, "errorMessage": message]))
    }

    static func split(target: String) -> (path: String, query: [String: String]) {
        let pieces = target.split(separator: "?", maxSplits: 1)
        var query: [String: String] = [:]
        if pieces.count == 2 {
            for pair in pieces[1].split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                if kv.count == 2 { query[String(kv[0])] = String(kv[1]).removingPercentEncoding }
            }
        }
        return (String(pieces.first ?? ""), query)
    }
}


/// The simulated API's world indexed once: any transaction id to its chain, and each customer's chains.
struct SimulatedAPIWorld: Sendable {
    /// Original or transaction id -> the chain's key (its original transaction id).
    let chainKey: [String: String]
    /// Customer -> the keys of its chains, sorted.
    private let customers: [String: [String]]
    private let customerOf: [String: String]

    init(_ chains: [String: SimulatedAPIChain]) {
        var chainKey: [String: String] = [:]
        var customers: [String: [String]] = [:]
        var customerOf: [String: String] = [:]
        for (original, chain) in chains {
            for transaction in chain.transactions {
                if let id = transaction["transactionId"] as? String, chainKey[id] == nil { chainKey[id] = original }
            }
            let customer = chain.customer ?? original
            customers[customer, default: []].append(original)
            customerOf[original] = customer
        }
        for original in chains.keys { chainKey[original] = original }  // an original id names its own chain first
        self.chainKey = chainKey
        self.customers = customers.mapValues { $0.sorted() }
        self.customerOf = customerOf
    }

    func customerChains(of original: String) -> [String] {
        customerOf[original].flatMap { customers[$0] } ?? [original]
    }
}

/// One notification of the simulated notification history, signed once at start.
struct SimulatedHistoryNotification: Sendable {
    var environment: String
    var notificationType: String?
    var signedDate: Int64
    var signedPayload: String

    /// The scenario's `api.notifications` specs (as `sign-notifications` reads them), signed by `chain`.
    static func sign(_ specs: [[UInt8]], chain: SigningChain) throws -> [SimulatedHistoryNotification] {
        let signer = SignedNotifications(chain: chain)
        return try specs.map { bytes in
            guard var spec = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
                throw SimulatorError("api.notifications: each one a JSON object")
            }
            if spec["signedDate"] == nil { spec["signedDate"] = Int64(Date().timeIntervalSince1970 * 1000) }
            let body = try signer.body(forSpec: Array(JSONSerialization.data(withJSONObject: spec)))
            guard let signed = NotificationV2Body.signedPayload(Array(body.utf8)) else { throw SimulatorError("a signed notification has no signedPayload") }
            let environment = (spec["data"] as? [String: Any])?["environment"] as? String ?? "Production"
            return SimulatedHistoryNotification(
                environment: environment == "Sandbox" ? "Sandbox" : "Production", notificationType: spec["notificationType"] as? String, signedDate: (spec["signedDate"] as? NSNumber)?.int64Value ?? 0,
                signedPayload: signed)
        }.sorted { $0.signedDate < $1.signedDate }
    }
}
