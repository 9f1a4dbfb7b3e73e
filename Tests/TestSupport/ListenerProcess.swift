import Foundation

/// A TCP listener on loopback (Python) that answers nothing: it counts the connections made to
/// it and closes each. What a proxy the job must not use sees, or one it must.
public final class ListenerProcess: @unchecked Sendable {
    // Immutable after init.
    public let port: Int
    private let process: Process
    private let lifeline = Pipe()
    private let log: URL

    public init() throws {
        log = FileManager.default.temporaryDirectory.appending(path: "rr-listener-\(UUID().uuidString).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let script = """
            import select, socket, sys
            listener = socket.socket()
            listener.bind(('127.0.0.1', 0))
            listener.listen(64)
            print(listener.getsockname()[1], flush=True)
            log = open(sys.argv[1], 'a')
            while True:
                readable, _, _ = select.select([listener, sys.stdin], [], [])
                if sys.stdin in readable and not sys.stdin.readline(): sys.exit(0)
                if listener in readable:
                    client, _ = listener.accept()
                    log.write('connection\\n'); log.flush()
                    client.close()
            """
        process = Process()
        process.executableURL = URL(filePath: "/usr/bin/python3")
        process.arguments = ["-c", script, log.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = lifeline
        try process.run()
        let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            process.terminate()
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "the listener said \(line)"])
        }
        self.port = port
    }

    /// Connections made to it so far.
    public var connections: Int {
        ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    public func stop() {
        try? lifeline.fileHandleForWriting.close()
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: log)
    }
}
