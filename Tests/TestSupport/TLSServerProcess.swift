import Foundation

/// A real HTTPS server on loopback (Python's `http.server` behind `ssl`), with a certificate for
/// `IP:127.0.0.1` issued by a CA of its own made with `openssl`: what the TLS tests trust or not.
/// Every request gets `answer` (`{"status":0}` unless told).
public final class TLSServerProcess: @unchecked Sendable {
    // Immutable after init.
    public let port: Int
    public let address: String
    /// The CA that issued the server's certificate (PEM): trusting it is trusting the server.
    public let certificateAuthorityFile: String
    private let directory: URL
    private let process: Process
    private let lifeline = Pipe()

    public var url: String { "https://\(address):\(port)/verifyReceipt" }

    /// `address` is where it listens; the certificate always names 127.0.0.1, so another
    /// loopback address (127.0.0.2) is a server whose name does not match.
    public init(address: String = "127.0.0.1", answer: String = #"{"status":0}"#) throws {
        self.address = address
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-tls-\(UUID().uuidString)")
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        func path(_ name: String) -> String { directory.appending(path: name).path }
        try "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: path("server.ext"), atomically: true, encoding: .utf8)
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try Self.openssl(["req", "-x509"] + curve + ["-keyout", path("ca.key"), "-out", path("ca.pem"), "-subj", "/CN=rr test CA",
                         "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"])
        try Self.openssl(["req"] + curve + ["-keyout", path("server.key"), "-out", path("server.csr"), "-subj", "/CN=127.0.0.1"])
        try Self.openssl(["x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
                          "-CAcreateserial", "-out", path("server.pem"), "-days", "2", "-extfile", path("server.ext")])
        certificateAuthorityFile = path("ca.pem")
        let script = """
            import http.server, ssl, sys, threading
            class Answer(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers.get('Content-Length', 0)))
                    body = sys.argv[4].encode()
                    self.send_response(200)
                    self.send_header('Content-Type', 'application/json')
                    self.send_header('Content-Length', str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                def log_message(self, *arguments): pass
            server = http.server.ThreadingHTTPServer((sys.argv[3], 0), Answer)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(sys.argv[1], sys.argv[2])
            server.socket = context.wrap_socket(server.socket, server_side=True)
            print(server.server_address[1], flush=True)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            sys.stdin.read()  # the test's lifeline: ends with the test process
            """
        process = Process()
        process.executableURL = URL(filePath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, path("server.pem"), path("server.key"), address, answer]
        let line = try startServer(process, lifeline: lifeline, name: "the TLS test server")
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSetupError(description: "unexpected TLS test server output")
        }
        self.port = port
    }

    deinit { stop() }

    public func stop() {
        // Its stdin closing ends it (a child of a test thread inherits a mask that blocks SIGTERM).
        try? lifeline.fileHandleForWriting.close()
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(filePath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestSetupError(description: "openssl \(arguments.prefix(2).joined(separator: " ")) failed")
        }
    }
}
