import Foundation

/// A TCP relay on loopback (Python) in front of a real server, which can cut every connection
/// through it with a reset, as a crashed server or a dropped network does: the client reads
/// ECONNRESET with no goodbye from the server. New connections are relayed as before.
public final class TCPCutter: @unchecked Sendable {
    // Immutable after init.
    public let port: Int
    private let process: Process
    private let lifeline = Pipe()

    /// `resettingFirst`: that many connections are reset as soon as the client has spoken (a TLS
    /// ClientHello), before anything reaches the server: a handshake cut by the network.
    public init(toHost host: String, port target: Int, resettingFirst resets: Int = 0) throws {
        // One thread and select: a socket closed while another thread sits in recv() on it is
        // not closed at all, and sends no reset.
        let script = """
            import select, socket, struct, sys
            listener = socket.socket()
            listener.bind(('127.0.0.1', 0))
            listener.listen(16)
            print(listener.getsockname()[1], flush=True)
            peer = {}
            resets = int(sys.argv[3])
            while True:
                readable, _, _ = select.select([listener, sys.stdin] + list(peer), [], [])
                for s in readable:
                    if s is listener:
                        client, _ = listener.accept()
                        if resets > 0:
                            resets -= 1
                            client.recv(65536)
                            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
                            client.close()
                            continue
                        server = socket.create_connection((sys.argv[1], int(sys.argv[2])))
                        peer[client], peer[server] = server, client
                    elif s is sys.stdin:
                        if not sys.stdin.readline(): sys.exit(0)
                        for c in list(peer):
                            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
                            c.close()
                        peer.clear()
                        print('cut', flush=True)
                    elif s in peer:
                        data = s.recv(65536)
                        if data:
                            peer[s].sendall(data)
                        else:
                            other = peer.pop(s)
                            peer.pop(other, None)
                            s.close()
                            other.close()
            """
        let relay = Process()
        relay.executableURL = URL(filePath: "/usr/bin/env")
        relay.arguments = ["python3", "-c", script, host, String(target), String(resets)]
        process = relay
        let line = try startServer(relay, lifeline: lifeline, name: "the TCP relay")
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSetupError(description: "unexpected TCP relay output")
        }
        self.port = port
    }

    deinit { stop() }

    /// Resets every connection open through the relay.
    public func cut() throws {
        try lifeline.fileHandleForWriting.write(contentsOf: Data("cut\n".utf8))
        // The relay answers "cut" once it has reset them; its first line (the port) was read already.
        let output = process.standardOutput as! Pipe
        _ = try readLine(output.fileHandleForReading, from: "the TCP relay")
    }

    public func stop() {
        try? lifeline.fileHandleForWriting.close()
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
