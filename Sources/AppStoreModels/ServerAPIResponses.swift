import Foundation

/// Get Transaction History v2 (`GET /inApps/v2/history/{transactionId}`): one page of signed
/// transactions. Nothing in it is trusted but the signed transactions, once verified: the
/// wrapper's bundleId has been seen masked in real answers.
public struct TransactionHistoryResponse: Sendable, Equatable {
    /// Where the next page starts (`?revision=`), while `hasMore`.
    public var revision: String?
    public var hasMore: Bool
    public var environment: String?
    public var signedTransactions: [String]

    public static func decode(_ body: some Collection<UInt8>) throws -> TransactionHistoryResponse {
        try AppleJSONReader.read(body) { reader in
            var revision, environment: String?
            var hasMore = false
            var signed: [String] = []
            try reader.readObject { key, reader in
                if key == "revision" { revision = try reader.value().string() }
                else if key == "hasMore" { hasMore = try reader.value().bool() ?? false }
                else if key == "environment" { environment = try reader.value().string() }
                else if key == "signedTransactions" { signed = try reader.signedList() }
                else { try reader.skipValue() }
            }
            return TransactionHistoryResponse(revision: revision, hasMore: hasMore, environment: environment, signedTransactions: signed)
        }
    }
}

/// Get All Subscription Statuses (`GET /inApps/v1/subscriptions/{transactionId}`): the last
/// transaction and renewal info of each subscription chain, signed.
public struct SubscriptionStatusesResponse: Sendable, Equatable {
    public struct LastTransaction: Sendable, Equatable {
        public var originalTransactionId: String?
        /// 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
        public var status: Int?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
    }

    public var environment: String?
    public var lastTransactions: [LastTransaction]

    public init(environment: String? = nil, lastTransactions: [LastTransaction]) {
        self.environment = environment
        self.lastTransactions = lastTransactions
    }

    public static func decode(_ body: some Collection<UInt8>) throws -> SubscriptionStatusesResponse {
        try AppleJSONReader.read(body) { reader in
            var environment: String?
            var last: [LastTransaction] = []
            try reader.readObject { key, reader in
                if key == "environment" { environment = try reader.value().string() }
                else if key == "data" {
                    try reader.flexibleArray { reader in
                        try reader.readObject { key, reader in
                            guard key == "lastTransactions" else { return try reader.skipValue() }
                            last += try reader.flexibleArray { reader in try LastTransaction(reading: &reader) }
                        }
                    }
                } else { try reader.skipValue() }
            }
            return SubscriptionStatusesResponse(environment: environment, lastTransactions: last)
        }
    }
}

extension SubscriptionStatusesResponse.LastTransaction {
    fileprivate init(reading reader: inout AppleJSONReader) throws {
        var original, transaction, renewal: String?
        var status: Int?
        try reader.readObject { key, reader in
            if key == "originalTransactionId" { original = try reader.value().string() }
            else if key == "status" { status = try reader.value().int("status") }
            else if key == "signedTransactionInfo" { transaction = try reader.value().string() }
            else if key == "signedRenewalInfo" { renewal = try reader.value().string() }
            else { try reader.skipValue() }
        }
        self.init(originalTransactionId: original, status: status, signedTransactionInfo: transaction, signedRenewalInfo: renewal)
    }
}

/// Get Notification History (`POST /inApps/v1/notifications/history`): one page of the App Store
/// Server Notifications V2 Apple sent (or tried to send) in a window, each as its signed payload.
public struct NotificationHistoryResponse: Sendable, Equatable {
    public var signedPayloads: [String]
    public var hasMore: Bool
    /// Where the next page starts (`?paginationToken=`), while `hasMore`.
    public var paginationToken: String?

    public init(signedPayloads: [String], hasMore: Bool, paginationToken: String?) {
        self.signedPayloads = signedPayloads
        self.hasMore = hasMore
        self.paginationToken = paginationToken
    }

    public static func decode(_ body: some Collection<UInt8>) throws -> NotificationHistoryResponse {
        try AppleJSONReader.read(body) { reader in
            var token: String?
            var hasMore = false
            var signed: [String] = []
            try reader.readObject { key, reader in
                if key == "paginationToken" { token = try reader.value().string() }
                else if key == "hasMore" { hasMore = try reader.value().bool() ?? false }
                else if key == "notificationHistory" {
                    _ = try reader.flexibleArray { reader in
                        try reader.readObject { key, reader in
                            if key == "signedPayload", let payload = try reader.value().string() { signed.append(payload) } else { try reader.skipValue() }
                        }
                    }
                } else { try reader.skipValue() }
            }
            return NotificationHistoryResponse(signedPayloads: signed, hasMore: hasMore, paginationToken: token)
        }
    }
}

/// The Server API's error body: `{"errorCode": 4040010, "errorMessage": "Transaction id not found."}`.
public struct ServerAPIError: Sendable, Equatable {
    public var errorCode: Int?
    public var errorMessage: String?

    /// The error of a body, or nil when the body is none (an HTML page of a proxy, say).
    public static func decode(_ body: some Collection<UInt8>) -> ServerAPIError? {
        try? AppleJSONReader.read(body) { reader in
            var code: Int?
            var message: String?
            try reader.readObject { key, reader in
                if key == "errorCode" { code = try reader.value().int("errorCode") }
                else if key == "errorMessage" { message = try reader.value().string() }
                else { try reader.skipValue() }
            }
            return ServerAPIError(errorCode: code, errorMessage: message)
        }
    }
}

extension AppleJSONReader {
    /// An array of JWS strings; null is empty.
    fileprivate mutating func signedList() throws -> [String] {
        var list: [String] = []
        try readArray { reader in
            if let text = try reader.value().string() { list.append(text) }
        }
        return list
    }
}
