import Foundation

/// One HTTP request.
public struct HTTPRequest: Sendable {
    public var url: String
    public var method: String
    /// Header lines as `Name: value`.
    public var headers: [String]
    public var body: [UInt8]
    /// Limit for establishing the TCP (and TLS) connection.
    public var connectTimeout: Duration
    /// Limit for the whole exchange, from the first try to connect to the last byte of the answer.
    public var totalTimeout: Duration
    /// Answers larger than this are cut off and fail with `HTTPError.Kind.responseTooLarge`.
    public var maximumResponseBytes: Int

    public init(
        url: String, method: String = "POST", headers: [String] = [], body: [UInt8] = [],
        connectTimeout: Duration = .seconds(10), totalTimeout: Duration = .seconds(60),
        maximumResponseBytes: Int = 16 << 20
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.connectTimeout = connectTimeout
        self.totalTimeout = totalTimeout
        self.maximumResponseBytes = maximumResponseBytes
    }
}

/// A complete HTTP answer, whatever its status.
public struct HTTPResponse: Sendable {
    public var status: Int
    /// Header names in lower case, values trimmed; the last of repeated headers wins.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why no complete HTTP answer came back.
public struct HTTPError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The connect or total timeout ran out.
        case timeout
        /// Nobody accepted the connection (refused, unreachable, or the name did not resolve).
        case connectionFailed
        /// The connection broke mid-exchange: reset, closed early, or the body ended short.
        case connectionLost
        /// The answer was larger than the request allowed.
        case responseTooLarge
        /// The TLS handshake or certificate check failed.
        case tls
        /// The task waiting for the answer was cancelled.
        case cancelled
        /// Anything else libcurl reported.
        case other
    }

    public var kind: Kind
    /// libcurl's own words, e.g. "Operation timed out after 2001 milliseconds with 0 bytes received".
    public var message: String
    public var curlCode: Int

    public init(kind: Kind, message: String, curlCode: Int = 0) {
        self.kind = kind
        self.message = message
        self.curlCode = curlCode
    }

    public var description: String { "HTTP \(kind.rawValue): \(message)" }
}
