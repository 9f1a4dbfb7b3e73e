import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// What the server does with one request.
public enum SimulatedReply: Sendable {
    /// A complete HTTP answer.
    case respond(status: Int, headers: [String: String] = [:], body: [UInt8])
    /// Close the connection without answering.
    case drop
    /// Send the headers and half the body, then close.
    case truncate(status: Int, body: [UInt8])
    /// Answer only after `milliseconds` (or never, if the client gives up first).
    case delayed(milliseconds: Int, then: [UInt8])
}

/// A small HTTP/1.1 server on loopback, with a thread per connection and keep-alive, for the
/// Apple simulator. It exists to misbehave on purpose (drop, truncate, stall), which a
/// general-purpose server makes hard; it is not for production traffic.
public final class LoopbackHTTPServer: Sendable {
    public typealias Handler = @Sendable (_ method: String, _ path: String, _ body: [UInt8], _ authorization: String?) -> SimulatedReply

    public struct Statistics: Sendable {
        public var requests = 0
        public var connections = 0
        public var openConnections = 0
        public var maximumOpenConnections = 0
        public var inFlight = 0
        public var maximumInFlight = 0
    }

    public let port: Int
    private let listener: Int32
    private let handler: Handler
    private let latency: Latency
    /// Answers nothing but the first request until this many were in flight at once (or 100 s
    /// passed): a test of concurrency then sees the most at once by construction, not by the clock.
    private let holdUntilInFlight: Int?
    private let statistics = Locked(Statistics())

    /// Listens on 127.0.0.1 (`port` 0 picks a free one).
    public init(host: String = "127.0.0.1", port: Int, latency: Latency = Latency(medianMilliseconds: 0), holdUntilInFlight: Int? = nil,
                handler: @escaping Handler) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw SimulatorError("socket() failed: \(String(cString: strerror(errno)))") }
        var reuse: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(listener)
            throw SimulatorError("not an IPv4 address: \(host)")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 4096) == 0 else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw SimulatorError("cannot listen on \(host):\(port): \(reason)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        self.listener = listener
        self.handler = handler
        self.latency = latency
        self.holdUntilInFlight = holdUntilInFlight
    }

    public var currentStatistics: Statistics { statistics.withLock { $0 } }

    /// Accepts connections until the process ends.
    public func serveForever() -> Never {
        signal(SIGPIPE, SIG_IGN)
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            var noDelay: Int32 = 1
            setsockopt(connection, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
            statistics.withLock { stats in
                stats.connections += 1
                stats.openConnections += 1
                stats.maximumOpenConnections = max(stats.maximumOpenConnections, stats.openConnections)
            }
            let thread = Thread { [self] in
                serve(connection)
                close(connection)
                statistics.withLock { $0.openConnections -= 1 }
            }
            thread.stackSize = 256 << 10
            thread.start()
        }
    }

    /// Serves one connection's requests in turn until the client closes it or a fault drops it.
    private func serve(_ connection: Int32) {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        func fill() -> Bool {
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return false }
            buffer.append(contentsOf: chunk[0..<count])
            return true
        }
        while true {
            var headerEnd: Int?
            while headerEnd == nil {
                headerEnd = buffer.firstRange(of: [13, 10, 13, 10])?.upperBound
                if headerEnd == nil && !fill() { return }
            }
            let head = String(decoding: buffer[..<headerEnd!], as: UTF8.self)
            let lines = head.split(separator: "\r\n")
            let requestLine = lines.first?.split(separator: " ") ?? []
            guard requestLine.count >= 2 else { return }
            var contentLength = 0
            var closeAfter = false
            var authorization: String?
            for line in lines.dropFirst() {
                let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2 else { continue }
                switch parts[0].lowercased() {
                case "content-length": contentLength = Int(parts[1]) ?? 0
                case "connection": closeAfter = parts[1].lowercased() == "close"
                case "authorization": authorization = parts[1]
                default: break
                }
            }
            while buffer.count < headerEnd! + contentLength {
                if !fill() { return }
            }
            let body = Array(buffer[headerEnd!..<(headerEnd! + contentLength)])
            buffer.removeFirst(headerEnd! + contentLength)

            let number = statistics.withLock { stats in
                stats.requests += 1
                stats.inFlight += 1
                stats.maximumInFlight = max(stats.maximumInFlight, stats.inFlight)
                return stats.requests
            }
            defer { statistics.withLock { $0.inFlight -= 1 } }
            // The first answer is not held: a client that prefers multiplexing (libcurl's PIPEWAIT)
            // opens no second connection before it has learnt from one that the server cannot.
            if let holdUntilInFlight, number > 1 {
                holdConnection(atMost: 280) { statistics.withLock { $0.maximumInFlight } >= holdUntilInFlight }
            }
            let wait = latency.sample()
            if wait > 0 { usleep(useconds_t(wait * 1_000)) }
            switch handler(String(requestLine[0]), String(requestLine[1]), body, authorization) {
            case .respond(let status, let headers, let body):
                guard send(connection, Self.head(status: status, headers: headers, length: body.count) + body) else { return }
            case .drop:
                return
            case .truncate(let status, let body):
                _ = send(connection, Self.head(status: status, headers: [:], length: body.count) + body.prefix(body.count / 2))
                return
            case .delayed(let milliseconds, let body):
                usleep(useconds_t(milliseconds * 1_000))
                guard send(connection, Self.head(status: 200, headers: [:], length: body.count) + body) else { return }
            }
            if closeAfter { return }
        }
    }

    private func send(_ connection: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    private static func head(status: Int, headers: [String: String], length: Int) -> [UInt8] {
        var text = "HTTP/1.1 \(status) \(reason(status))\r\nContent-Length: \(length)\r\n"
        if headers["Content-Type"] == nil { text += "Content-Type: application/json\r\n" }
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { text += "\(name): \(value)\r\n" }
        return Array((text + "\r\n").utf8)
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 404: "Not Found"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

public struct SimulatorError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// How long Apple takes to answer: a fixed time, or (with a tail) log-normal around a median,
/// as real services answer: most requests near the median, one in a hundred beyond `p99`.
public struct Latency: Sendable {
    public var medianMilliseconds: Int
    /// The 99th percentile; nil or the median itself: every answer takes the median.
    public var p99Milliseconds: Int?

    public init(medianMilliseconds: Int, p99Milliseconds: Int? = nil) {
        self.medianMilliseconds = medianMilliseconds
        self.p99Milliseconds = p99Milliseconds
    }

    /// ln(p99 / median) / z(0.99): the log-normal's sigma for that tail.
    var sigma: Double {
        guard let p99Milliseconds, medianMilliseconds > 0, p99Milliseconds > medianMilliseconds else { return 0 }
        return log(Double(p99Milliseconds) / Double(medianMilliseconds)) / 2.326_348
    }

    /// The mean wait, for the throughput ceiling C / mean.
    public var meanMilliseconds: Double { Double(medianMilliseconds) * exp(sigma * sigma / 2) }

    /// One answer's wait in milliseconds (Box-Muller for the normal deviate).
    public func sample() -> Int {
        var generator = SystemRandomNumberGenerator()
        return sample(using: &generator)
    }

    public func sample(using generator: inout some RandomNumberGenerator) -> Int {
        let sigma = sigma
        guard sigma > 0 else { return medianMilliseconds }
        let u1 = Double.random(in: Double.ulpOfOne..<1, using: &generator)
        let u2 = Double.random(in: 0..<1, using: &generator)
        let z = (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
        return Int((Double(medianMilliseconds) * exp(sigma * z)).rounded())
    }
}

/// Holds one request on its connection's thread (each has a thread of its own, so only this
/// request waits) until `released` says so or `seconds` have passed: the scenario's holds, which
/// let a test decide when the simulator answers.
func holdConnection(atMost seconds: TimeInterval, until released: () -> Bool) {
    let deadline = Date().addingTimeInterval(seconds)
    while !released() && Date() < deadline { usleep(2_000) }
}
