import AppleSimulator
import CommandLineValues
import ArgumentParser
import Foundation

struct SimulateAppleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate-apple",
        abstract: "A local Apple for the demo and the tests: the verifyReceipt simulator, and signed V2 notifications.",
        subcommands: [SimulateAppleServe.self, SignNotificationsCommand.self],
        defaultSubcommand: SimulateAppleServe.self
    )
}

struct SimulateAppleServe: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serves a local verifyReceipt simulator on loopback (the default of simulate-apple).",
        discussion: """
            Production is POST /verifyReceipt, sandbox POST /sandbox/verifyReceipt; the App Store Server \
            API is served under /inApps/ (production) and /sandbox/inApps/ (sandbox), from the scenario's \
            "api" section, signed with the simulator's chain, within Apple's quota when one is set (api_quota, \
            --api-quota-window); GET /__stats counts requests and connections, GET /__api_stats the API's requests and \
            429s per endpoint. Point the job at it with \
            APPLE_PRODUCTION_URL=http://127.0.0.1:PORT/verifyReceipt and \
            APPLE_SANDBOX_URL=http://127.0.0.1:PORT/sandbox/verifyReceipt.

            Answers come from the scenario file (receipt -> environment, answer, scripted faults; see \
            docs/development.md) or, for synthetic receipts (base64 of "simulated-receipt:" + JSON spec), from the \
            spec inside the receipt. Prints "listening on http://127.0.0.1:PORT" once ready, then serves \
            until killed.

            At start it makes (or loads, from --signing-dir) its own signing chain shaped like Apple's: a \
            test root, an intermediate and a leaf with Apple's extension OIDs. The job trusts data it \
            signs only when told to: --apple-root-certificate DIR/root.der.
            """
    )

    @Option(help: "Directory of the simulator's signing chain (made there if absent; default: a new temporary directory).")
    var signingDir: String?

    @Option(help: "Scenario file (JSON). Without one, only synthetic receipts are known.")
    var scenario: String?

    @Option(help: "Loopback address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port: Int = 0

    @Option(help: "Milliseconds added to every answer (overrides the scenario's latency_ms); with --latency-p99-ms, the median.")
    var latencyMs: Int?

    @Option(help: "A tail: answers take log-normal times around --latency-ms, one in a hundred longer than this.")
    var latencyP99Ms: Int?

    @Option(help: "Shared secret the simulator expects (overrides the scenario's shared_secret); others get 21004.")
    var sharedSecret: String?

    @Option(help: ArgumentHelp(
        "Enforce Apple's App Store Server API quota (production 50, sandbox 5 requests a second on each of history, statuses and notification-history) over windows of this many seconds instead of Apple's hour (3600); past it, 429 with Retry-After. Overrides the scenario's api_quota window.",
        valueName: "seconds"))
    var apiQuotaWindow: Double?

    @Flag(help: ArgumentHelp("Exit when standard input reaches its end (for test harnesses).", visibility: .hidden))
    var exitWhenStdinCloses = false

    func validate() throws {
        // An address literal it can bind: 127.x.y.z or ::1.
        guard host != "localhost" && (AppleURL.isLoopback(host: host) || AppleURL.isLoopback(host: "[\(host)]")) else {
            throw ValidationError("--host must be a loopback address: the simulator is for local use only")
        }
    }

    func run() throws {
        raiseOpenFileLimit()  // a thread and a socket per connection
        var scenario = try self.scenario.map { try SimulationScenario(contentsOf: URL(filePath: $0)) } ?? SimulationScenario()
        if let sharedSecret { scenario.sharedSecret = sharedSecret }
        if let apiQuotaWindow {
            guard apiQuotaWindow > 0 else { throw ValidationError("--api-quota-window must be positive") }
            scenario.apiQuota = SimulatedAPIQuota(
                windowSeconds: apiQuotaWindow, production: scenario.apiQuota?.production ?? [:], sandbox: scenario.apiQuota?.sandbox ?? [:])
        }
        let signingDirectory = signingDir.map { URL(filePath: $0) }
            ?? FileManager.default.temporaryDirectory.appending(path: "simulate-apple-\(UUID().uuidString)")
        let chain = try SigningChain.loadOrCreate(directory: signingDirectory)
        FileHandle.standardError.write(Data("signing root: \(signingDirectory.appending(path: SigningChain.rootFileName).path)\n".utf8))
        let simulator = try AppleSimulator(scenario: scenario, signingChain: chain, host: host, port: port, latencyMilliseconds: latencyMs,
                                           latencyP99Milliseconds: latencyP99Ms)
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

struct SignNotificationsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-notifications",
        abstract: "Signs App Store Server Notifications V2 with the simulator's chain, for the demo and the tests.",
        discussion: """
            Reads specs from standard input, one JSON object a line, each written as Apple's decoded \
            notification payload (notificationType, subtype, notificationUUID, signedDate, data with \
            bundleId, appAppleId, environment), with data.transactionInfo and data.renewalInfo as plain \
            objects: they are signed into signedTransactionInfo and signedRenewalInfo. Prints one V2 body \
            ({"signedPayload": ...}) a line, ready for ingest-notifications. A spec may set \
            "simulatorFault" to one of wrong-key, expired-leaf, missing-oid, tampered, to sign badly.
            """
    )

    @Option(help: "Directory of the simulator's signing chain (made there if absent).")
    var signingDir: String

    func run() throws {
        let signer = SignedNotifications(chain: try SigningChain.loadOrCreate(directory: URL(filePath: signingDir)))
        var lineNumber = 0
        while let line = readLine(strippingNewline: true) {
            lineNumber += 1
            guard !line.trimmingCharacters(in: .whitespaces).isEmpty else { continue }
            do {
                print(try signer.body(forSpec: Array(line.utf8)))
            } catch {
                throw ValidationError("line \(lineNumber): \(error)")
            }
        }
    }
}
