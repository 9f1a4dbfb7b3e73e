import CCurl
import Foundation
import Locking

/// One request's easy handle, buffers and waiting continuation.
///
/// `@unchecked Sendable`: created by the caller, then handed to the loop thread, which alone
/// touches it until `finish` resumes the continuation exactly once.
final class Transfer: @unchecked Sendable {
    let request: HTTPRequest
    /// Set by the caller's cancellation handler, read by the loop thread before it starts the transfer.
    let isCancelled = Locked(false)
    var continuation: CheckedContinuation<Result<HTTPResponse, HTTPError>, Never>?
    private(set) var easy: UnsafeMutableRawPointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    var body: [UInt8] = []
    var headers: [String: String] = [:]
    var exceededLimit = false
    /// libcurl keeps this pointer for the handle's life, so it must not move: allocated, not an array.
    private let errorBuffer: UnsafeMutablePointer<CChar> = {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        buffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        return buffer
    }()

    init(request: HTTPRequest) {
        self.request = request
    }

    deinit {
        if let easy { curl_easy_cleanup(easy) }
        if let headerList { curl_slist_free_all(headerList) }
        errorBuffer.deallocate()
    }

    /// Creates and configures the easy handle.
    func start(configuration: HTTPClient.Configuration) throws(HTTPError) -> UnsafeMutableRawPointer {
        guard let easy = curl_easy_init() else {
            throw HTTPError(kind: .other, message: "curl_easy_init failed")
        }
        self.easy = easy
        let context = Unmanaged.passUnretained(self).toOpaque()
        var failures: [CURLcode] = []
        func check(_ code: CURLcode) { if code != CURLE_OK { failures.append(code) } }

        check(rr_curl_easy_setopt_string(easy, CURLOPT_URL, request.url))
        check(rr_curl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        check(rr_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        check(rr_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1))
        check(rr_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2))
        if let file = configuration.trustedCertificatesFile { check(rr_curl_easy_setopt_string(easy, CURLOPT_CAINFO, file)) }
        // The proxy configured, or none: "" and a no-proxy list of every host, so that no
        // variable of the environment (http_proxy, HTTPS_PROXY, ALL_PROXY) sends a request elsewhere.
        check(rr_curl_easy_setopt_string(easy, CURLOPT_PROXY, configuration.proxy ?? ""))
        check(rr_curl_easy_setopt_string(easy, CURLOPT_NOPROXY, configuration.proxy == nil ? "*" : ""))
        check(rr_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)))
        check(rr_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, configuration.preferMultiplexing ? 1 : 0))
        // libcurl reads 0 as "no limit": every request has one, of 1 ms at the least.
        check(rr_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, max(1, request.connectTimeout.milliseconds)))
        check(rr_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, max(1, request.totalTimeout.milliseconds)))
        check(rr_curl_easy_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, ""))
        check(rr_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method))
        check(rr_curl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer))
        // A body goes as POST fields; CURLOPT_CUSTOMREQUEST above names the method (PUT for
        // Send Consumption Information).
        if request.method == "POST" || !request.body.isEmpty {
            check(rr_curl_easy_setopt_long(easy, CURLOPT_POST, 1))
            check(rr_curl_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
            request.body.withUnsafeBytes { bytes in
                let pointer = UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!)
                check(rr_curl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, pointer))
            }
        }
        for header in request.headers + ["Expect:"] {  // no 100-continue round trip
            headerList = curl_slist_append(headerList, header)
        }
        check(rr_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList))
        check(rr_curl_easy_setopt_pointer(easy, CURLOPT_PRIVATE, context))
        check(rr_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context))
        check(rr_curl_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION) { data, size, count, context in
            let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
            let length = size * count
            guard transfer.body.count + length <= transfer.request.maximumResponseBytes else {
                transfer.exceededLimit = true
                return 0  // makes libcurl stop with CURLE_WRITE_ERROR
            }
            transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length))
            return length
        })
        check(rr_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context))
        check(rr_curl_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION) { data, size, count, context in
            let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
            let length = size * count
            // As bytes: Foundation's trimming per header line was a visible cost per request.
            let line = UnsafeRawBufferPointer(start: data, count: length)
            if line.starts(with: "HTTP/".utf8) {
                transfer.headers.removeAll()  // a new response (after a redirect or 100 Continue)
            } else if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
                func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
                var start = colon + 1
                var end = length
                while start < end && isSpace(line[start]) { start += 1 }
                while end > start && isSpace(line[end - 1]) { end -= 1 }
                let name = String(decoding: line[..<colon].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
                let value = String(decoding: line[start..<end], as: UTF8.self)
                transfer.headers[name] = value
                if name == "content-length", let expected = Int(value), expected <= transfer.request.maximumResponseBytes {
                    transfer.body.reserveCapacity(expected)
                }
            }
            return length
        })
        if let failure = failures.first {
            throw HTTPError(kind: .other, message: String(cString: curl_easy_strerror(failure)), curlCode: Int(failure.rawValue))
        }
        return easy
    }

    /// Called on the loop thread when libcurl is done with the transfer.
    func complete(code: CURLcode) {
        guard let easy else { return }
        if code == CURLE_OK {
            var status = 0
            _ = rr_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            finish(.success(HTTPResponse(status: status, headers: headers, body: body)))
            return
        }
        let detail = String(cString: errorBuffer)
        let message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
        let kind: HTTPError.Kind
        switch code {
        case CURLE_OPERATION_TIMEDOUT: kind = .timeout
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: kind = .connectionFailed
        case CURLE_WRITE_ERROR where exceededLimit: kind = .responseTooLarge
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM:
            kind = .connectionLost
        case CURLE_SSL_CONNECT_ERROR where handshakeWasCut(easy, detail: detail):
            kind = .connectionLost
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE:
            kind = .tls
        default: kind = .other
        }
        let limitNote = kind == .responseTooLarge ? " (limit \(request.maximumResponseBytes) bytes)" : ""
        finish(.failure(HTTPError(kind: kind, message: message + limitNote, curlCode: Int(code.rawValue))))
    }

    /// A TLS handshake that failed because the connection was reset or closed under it (a network
    /// blip, a restarting load balancer) is a lost connection, retried like any reset; a handshake
    /// the peer refused or whose certificate did not verify stays a final TLS failure. Read on the
    /// loop thread, with the failing call's errno and error text.
    private func handshakeWasCut(_ easy: UnsafeMutableRawPointer, detail: String) -> Bool {
        var osErrno = 0
        _ = rr_curl_easy_getinfo_long(easy, CURLINFO_OS_ERRNO, &osErrno)
        if [ECONNRESET, ECONNABORTED, EPIPE].contains(Int32(truncatingIfNeeded: osErrno)) { return true }
        // OpenSSL's words for a peer gone mid-handshake without an alert (libcurl 7.88 sets no errno for some).
        let text = detail.lowercased()
        return ["connection reset", "ssl_error_syscall", "unexpected eof", "broken pipe"].contains { text.contains($0) }
    }

    func finish(_ result: Result<HTTPResponse, HTTPError>) {
        continuation?.resume(returning: result)
        continuation = nil
    }
}

extension Duration {
    var milliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1_000 + Int(attoseconds / 1_000_000_000_000_000)
    }
}
