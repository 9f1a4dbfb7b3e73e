import Foundation

/// A PostgreSQL cluster of one test's own, for tests that restart the server (the shared test
/// cluster must stay up for the tests running alongside). Uses the binaries `scripts/test` found.
public final class ThrowawayCluster: @unchecked Sendable {
    // Immutable after init.
    public let port: Int
    public let directory: URL
    private let bin: String

    public var adminConnectionString: String { "host=127.0.0.1 port=\(port) user=postgres dbname=postgres" }

    public init() throws {
        guard let bin = ProcessInfo.processInfo.environment["RR_PG_BIN"] else {
            throw TestSetupError(description: "RR_PG_BIN is not set: run the tests with scripts/test")
        }
        self.bin = bin
        directory = URL(filePath: "/tmp").appending(path: "rr-cluster-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        port = freeLoopbackPort()
        if getuid() == 0 {
            try Self.shell(["chown", "postgres:postgres", directory.path])
        }
        try asOwner(["\(bin)/initdb", "-D", directory.appending(path: "data").path, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                     "--locale=C.UTF-8"])
        try start()
    }

    deinit {
        try? asOwner(["\(bin)/pg_ctl", "-D", directory.appending(path: "data").path, "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(at: directory)
    }

    public func start() throws {
        try asOwner(["\(bin)/pg_ctl", "-D", directory.appending(path: "data").path, "-l", directory.appending(path: "log").path,
                     "-w", "-t", "60", "start", "-o",
                     "-c listen_addresses=127.0.0.1 -p \(port) -k \(directory.path) -c fsync=off -c max_connections=50"])
    }

    /// Stops the server at once (every session is cut) and starts it again.
    public func restart() throws {
        try asOwner(["\(bin)/pg_ctl", "-D", directory.appending(path: "data").path, "-m", "immediate", "-w", "stop"])
        try start()
    }

    private func asOwner(_ arguments: [String]) throws {
        try Self.shell(getuid() == 0 ? ["runuser", "-u", "postgres", "--"] + arguments : arguments)
    }

    /// Runs a command and waits with waitpid (Foundation's Process did not return here once the
    /// server it started outlived pg_ctl). Arguments are the test's own paths and flags.
    static func shell(_ arguments: [String]) throws {
        let command = arguments.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let status = system(command + " </dev/null >/dev/null 2>&1")
        guard status == 0 else {
            throw TestSetupError(description: "\(arguments.joined(separator: " ")) failed with status \(status)")
        }
    }
}

/// A loopback port nobody listened on a moment ago (for a server to start, or a connection to fail).
public func freeLoopbackPort() -> Int {
    let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socketDescriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketDescriptor, $0, length) } }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socketDescriptor, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}
