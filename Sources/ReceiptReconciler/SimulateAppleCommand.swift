import AppleSimulator
import ArgumentParser
import Foundation

struct SimulateAppleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate-apple",
        abstract: "Serves a local verifyReceipt simulator on loopback, for the demo and the tests.",
        discussion: """
            Production is POST /verifyReceipt, sandbox POST /sandbox/verifyReceipt; GET /__stats counts \
            requests and connections. Point the job at it with \
            APPLE_PRODUCTION_URL=http://127.0.0.1:PORT/verifyReceipt and \
            APPLE_SANDBOX_URL=http://127.0.0.1:PORT/sandbox/verifyReceipt.

            Answers come from the scenario file (receipt -> environment, answer, scripted faults; see \
            README) or, for synthetic receipts (base64 of "simulated-receipt:" + JSON spec), from the \
            spec inside the receipt. Prints "listening on http://127.0.0.1:PORT" once ready, then serves \
            until killed.
            """
    )

    @Option(help: "Scenario file (JSON). Without one, only synthetic receipts are known.")
    var scenario: String?

    @Option(help: "Loopback address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port: Int = 0

    @Option(help: "Milliseconds added to every answer (overrides the scenario's latency_ms).")
    var latencyMs: Int?

    @Option(help: "Shared secret the simulator expects (overrides the scenario's shared_secret); others get 21004.")
    var sharedSecret: String?

    @Flag(help: ArgumentHelp("Exit when standard input reaches its end (for test harnesses).", visibility: .hidden))
    var exitWhenStdinCloses = false

    func validate() throws {
        guard host.hasPrefix("127.") || host == "::1" else {
            throw ValidationError("--host must be a loopback address: the simulator is for local use only")
        }
    }

    func run() throws {
        raiseOpenFileLimit()  // a thread and a socket per connection
        var scenario = try self.scenario.map { try SimulationScenario(contentsOf: URL(filePath: $0)) } ?? SimulationScenario()
        if let sharedSecret { scenario.sharedSecret = sharedSecret }
        let simulator = try AppleSimulator(scenario: scenario, host: host, port: port, latencyMilliseconds: latencyMs)
        if exitWhenStdinCloses {
            Thread.detachNewThread {
                _ = FileHandle.standardInput.readDataToEndOfFile()
                Foundation.exit(0)
            }
        }
        // Written unbuffered: whoever started the simulator waits for this line.
        FileHandle.standardOutput.write(Data("listening on http://\(host):\(simulator.port)\n".utf8))
        simulator.serveForever()
    }
}
