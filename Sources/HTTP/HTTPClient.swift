import CCurl
import Foundation
import Locking

/// Many HTTP requests in flight at once on one libcurl multi handle, with keep-alive,
/// connection reuse and HTTP/2 multiplexing where the server offers it.
///
/// One thread of its own drives the multi handle; `execute` hands a request to it and awaits the
/// answer through a continuation, so no blocking call ever runs on Swift's cooperative pool.
/// The thread waits in epoll on the sockets libcurl names (its multi_socket API), so each
/// wake-up costs what is ready, not the number of requests in flight: with `curl_multi_poll`
/// every wake-up walked all C transfers and polled all their sockets.
/// TLS peer and host verification are always on: there is no switch to turn them off.
///
/// Lifetime: the loop thread holds the client until `shutdown()`, which every owner must call
/// (once is enough; later calls return at once). A client never shut down keeps its thread and
/// sockets; `deinit` can only run after the loop ended, and checks that it did.
///
/// `Sendable`: the multi handle and the socket watch are only used on the loop thread; other
/// threads only signal the wake-up eventfd; the queue shared with callers is behind a `Locked`.
public final class HTTPClient: Sendable {
    public struct Configuration: Sendable {
        /// Connections kept open to one host. Requests beyond them wait in libcurl's queue
        /// (or share a connection, over HTTP/2).
        public var maximumConnectionsPerHost: Int
        /// Prefer waiting for a connection that can multiplex over opening a new one.
        public var preferMultiplexing: Bool
        /// PEM certificates to trust instead of the system's (libcurl's CAINFO): a private CA in
        /// front of the real service, or a test server. Verification itself stays on.
        public var trustedCertificatesFile: String?
        /// The proxy every request goes through; nil for none, whatever the environment's
        /// `http_proxy`, `HTTPS_PROXY` or `ALL_PROXY` say (libcurl would follow them).
        public var proxy: String?

        public init(
            maximumConnectionsPerHost: Int = 64, preferMultiplexing: Bool = true, trustedCertificatesFile: String? = nil, proxy: String? = nil
        ) {
            self.maximumConnectionsPerHost = maximumConnectionsPerHost
            self.preferMultiplexing = preferMultiplexing
            self.trustedCertificatesFile = trustedCertificatesFile
            self.proxy = proxy
        }
    }

    private struct SharedState {
        var submitted: [Transfer] = []
        var cancelled: [Transfer] = []
        var isShuttingDown = false
    }

    // `nonisolated(unsafe)`: set in init before the loop thread starts, then used on that thread
    // only (and in deinit, after the loop has finished): never from two threads at once.
    private nonisolated(unsafe) let multi: UnsafeMutableRawPointer
    private nonisolated(unsafe) let watch: SocketWatch
    /// An eventfd: any thread writes to it to wake the loop (a submission, a cancellation, shutdown).
    private let wakeup: Int32
    private let state = Locked(SharedState())
    private let loopFinished = DispatchSemaphore(value: 0)

    public init(configuration: Configuration = Configuration()) {
        HTTPClient.initializeLibcurlOnce()
        guard let multi = curl_multi_init() else { preconditionFailure("curl_multi_init failed: out of memory") }
        self.multi = multi
        let epoll = rr_epoll_create()
        let wakeup = rr_eventfd_create()
        precondition(epoll >= 0 && wakeup >= 0, "epoll_create1 or eventfd failed: \(String(cString: strerror(errno)))")
        precondition(rr_epoll_watch(epoll, wakeup, 1, 0) == 0, "epoll_ctl failed: \(String(cString: strerror(errno)))")
        self.watch = SocketWatch(epoll: epoll)
        self.wakeup = wakeup
        let context = Unmanaged.passUnretained(watch).toOpaque()
        for code in [rr_curl_multi_setopt_socket_callback(multi, SocketWatch.socketCallback),
                     rr_curl_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, context),
                     rr_curl_multi_setopt_timer_callback(multi, SocketWatch.timerCallback),
                     rr_curl_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, context)] {
            precondition(code == CURLM_OK, "curl_multi_setopt failed: \(String(cString: curl_multi_strerror(code)))")
        }
        // Constants of this program: a failure is a libcurl too old for it, not a runtime condition.
        for (option, value) in [(CURLMOPT_MAX_HOST_CONNECTIONS, configuration.maximumConnectionsPerHost),
                                (CURLMOPT_MAXCONNECTS, configuration.maximumConnectionsPerHost),
                                (CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))] {
            let code = rr_curl_multi_setopt_long(multi, option, value)
            precondition(code == CURLM_OK, "curl_multi_setopt(\(option.rawValue)) failed: \(String(cString: curl_multi_strerror(code)))")
        }
        let thread = Thread { [self] in
            Thread.current.name = "curl-multi"
            runLoop(configuration: configuration)
            loopFinished.signal()
        }
        thread.start()
    }

    deinit {
        precondition(state.withLock { $0.isShuttingDown }, "an HTTPClient must be shut down before it is released")
        curl_multi_cleanup(multi)  // may still tell the watch to forget sockets: close after it
        close(watch.epoll)
        close(wakeup)
    }

    /// Stops the loop; requests still in flight fail with `cancelled`. Waits for the loop to end.
    public func shutdown() {
        let alreadyDown = state.withLock { state in
            defer { state.isShuttingDown = true }
            return state.isShuttingDown
        }
        guard !alreadyDown else { return }
        rr_eventfd_signal(wakeup)
        loopFinished.wait()
    }

    /// Sends `request` and returns the answer, whatever its status code. Throws only when no
    /// complete answer came back.
    public func execute(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        guard !Task.isCancelled else { throw HTTPError(kind: .cancelled, message: "the request was cancelled") }
        let transfer = Transfer(request: request)
        let result: Result<HTTPResponse, HTTPError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                transfer.continuation = continuation
                let accepted = state.withLock { state in
                    guard !state.isShuttingDown else { return false }
                    state.submitted.append(transfer)
                    return true
                }
                if accepted {
                    rr_eventfd_signal(wakeup)
                } else {
                    transfer.finish(.failure(HTTPError(kind: .cancelled, message: "the HTTP client was shut down")))
                }
            }
        } onCancel: {
            // Marked first: a cancellation that overtakes the submission is honoured when it starts.
            transfer.isCancelled.withLock { $0 = true }
            state.withLock { $0.cancelled.append(transfer) }
            rr_eventfd_signal(wakeup)
        }
        return try result.get()
    }

    private static let libcurlInitialized: Bool = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK
    }()

    private static func initializeLibcurlOnce() {
        precondition(libcurlInitialized, "curl_global_init failed")
    }

    // MARK: - The loop thread

    private func runLoop(configuration: Configuration) {
        var active: [UnsafeMutableRawPointer: Transfer] = [:]
        var readyDescriptors = [Int32](repeating: -1, count: 64)
        var readyMasks = [Int32](repeating: 0, count: 64)
        while true {
            let (submitted, cancelled, isShuttingDown) = state.withLock { state in
                defer {
                    state.submitted.removeAll()
                    state.cancelled.removeAll()
                }
                return (state.submitted, state.cancelled, state.isShuttingDown)
            }
            for transfer in submitted {
                guard !transfer.isCancelled.withLock({ $0 }) else {
                    transfer.finish(.failure(HTTPError(kind: .cancelled, message: "the request was cancelled")))
                    continue
                }
                let easy: UnsafeMutableRawPointer
                do {
                    easy = try transfer.start(configuration: configuration)
                } catch {
                    transfer.finish(.failure(error))
                    continue
                }
                let code = curl_multi_add_handle(multi, easy)
                guard code == CURLM_OK else {
                    transfer.finish(.failure(HTTPError(kind: .other, message: "curl_multi_add_handle: \(String(cString: curl_multi_strerror(code)))")))
                    continue
                }
                active[easy] = transfer
            }
            for transfer in cancelled {
                guard let easy = transfer.easy, active.removeValue(forKey: easy) != nil else { continue }
                curl_multi_remove_handle(multi, easy)
                transfer.finish(.failure(HTTPError(kind: .cancelled, message: "the request was cancelled")))
            }
            if isShuttingDown {
                for (easy, transfer) in active {
                    curl_multi_remove_handle(multi, easy)
                    transfer.finish(.failure(HTTPError(kind: .cancelled, message: "the HTTP client was shut down")))
                }
                let late = state.withLock { state in
                    defer { state.submitted.removeAll() }
                    return state.submitted
                }
                for transfer in late {
                    transfer.finish(.failure(HTTPError(kind: .cancelled, message: "the HTTP client was shut down")))
                }
                return
            }

            // libcurl's timer (a new transfer to start, a timeout, a retry) when it is due.
            if let deadline = watch.deadline, deadline <= SocketWatch.now() {
                watch.deadline = nil
                act(on: SocketWatch.timeout, ready: 0, active: &active)
            }
            var remaining: Int32 = 0
            while let message = curl_multi_info_read(multi, &remaining) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                let code = message.pointee.data.result
                curl_multi_remove_handle(multi, easy)
                if let transfer = active.removeValue(forKey: easy) {
                    transfer.complete(code: code)
                }
            }
            // At most a second, so a lost wake-up could only ever delay, never stall.
            let wait = watch.deadline.map { Int32(clamping: min(1_000, $0 - min($0, SocketWatch.now()))) } ?? 1_000
            let count = rr_epoll_wait(watch.epoll, &readyDescriptors, &readyMasks, Int32(readyDescriptors.count), wait)
            for index in 0..<max(0, Int(count)) {
                if readyDescriptors[index] == wakeup {
                    rr_eventfd_drain(wakeup)
                } else {
                    act(on: readyDescriptors[index], ready: readyMasks[index], active: &active)
                }
            }
        }
    }

    /// Lets libcurl work on one ready socket (or on its timer): it reads, writes and calls back.
    private func act(on socket: Int32, ready: Int32, active: inout [UnsafeMutableRawPointer: Transfer]) {
        var running: Int32 = 0
        let code = curl_multi_socket_action(multi, socket, ready, &running)
        guard code != CURLM_OK else { return }
        // The multi handle itself failed (out of memory, a libcurl bug): no transfer can go on.
        let error = HTTPError(kind: .other, message: "curl_multi_socket_action: \(String(cString: curl_multi_strerror(code)))")
        for (easy, transfer) in active {
            curl_multi_remove_handle(multi, easy)
            transfer.finish(.failure(error))
        }
        active.removeAll()
    }
}

/// The sockets libcurl wants watched, in one epoll instance, and when it next wants its timer.
/// Only the loop thread touches it: libcurl calls back from inside the loop's own curl calls.
final class SocketWatch {
    let epoll: Int32
    /// Monotonic milliseconds at which libcurl wants `curl_multi_socket_action` with the timeout
    /// socket; nil when it wants none.
    var deadline: UInt64?

    init(epoll: Int32) {
        self.epoll = epoll
    }

    static let timeout: Int32 = -1  // CURL_SOCKET_TIMEOUT

    static func now() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds / 1_000_000
    }

    static let socketCallback: curl_socket_callback = { _, socket, what, context, _ in
        let watch = Unmanaged<SocketWatch>.fromOpaque(context!).takeUnretainedValue()
        if what == CURL_POLL_REMOVE {
            _ = rr_epoll_unwatch(watch.epoll, socket)  // a socket already closed is gone from epoll too
            return 0
        }
        let watched = rr_epoll_watch(watch.epoll, socket, what & CURL_POLL_IN != 0 ? 1 : 0, what & CURL_POLL_OUT != 0 ? 1 : 0)
        return watched == 0 ? 0 : -1  // -1: libcurl fails the transfers on this socket rather than leave them unwatched
    }

    static let timerCallback: curl_multi_timer_callback = { _, milliseconds, context in
        let watch = Unmanaged<SocketWatch>.fromOpaque(context!).takeUnretainedValue()
        watch.deadline = milliseconds < 0 ? nil : now() + UInt64(milliseconds)
        return 0
    }
}
