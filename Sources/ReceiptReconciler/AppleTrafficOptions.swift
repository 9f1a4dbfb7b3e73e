import AppStore
import ArgumentParser
import CommandLineValues
import Foundation
import Jobs
import Throttling

/// How the run talks to verifyReceipt: how much at once, how often, how long, where, with which
/// secret (docs/apple.md, "verifyReceipt").
struct AppleTrafficOptions: ParsableArguments {
    @Option(help: "Apple requests in flight at once.")
    var concurrency = RunOptions.defaults.concurrency

    @Option(help: ArgumentHelp("Apple requests per second at most (default: unlimited).", valueName: "requests-per-second"))
    var rateLimit: Double?

    @Option(help: "Attempts per receipt before it is deferred to a later run.")
    var maxAttempts = RunOptions.defaults.policy.maximumAttempts

    @Option(help: "Time limit for one exchange with Apple.")
    var requestTimeout = TimeLength(RunOptions.defaults.policy.requestTimeout)

    @Flag(help: "Ask Apple to leave out old renewals (off by default: the finance ledger needs the whole history).")
    var excludeOldTransactions = false

    @Option(help: ArgumentHelp("verifyReceipt production address (default: $APPLE_PRODUCTION_URL, else Apple's).", valueName: "url"))
    var appleProductionURL: String?

    @Option(help: ArgumentHelp("verifyReceipt sandbox address (default: $APPLE_SANDBOX_URL, else Apple's).", valueName: "url"))
    var appleSandboxURL: String?

    @Option(help: ArgumentHelp(
        "File holding the app's shared secret, its owner's alone (chmod 600); without it the secret is read from the APPLE_SHARED_SECRET variable. Never pass the secret itself on the command line.",
        valueName: "path"))
    var sharedSecretFile: String?

    func validate() throws {
        guard concurrency >= 1 && concurrency <= 10_000 else { throw ValidationError("--concurrency must be between 1 and 10000") }
        guard maxAttempts >= 1 && maxAttempts <= 100 else { throw ValidationError("--max-attempts must be between 1 and 100") }
        if let rateLimit, !RequestRate.range.contains(rateLimit) {
            throw ValidationError("--rate-limit must be between \(RequestRate.range.lowerBound) and \(Int(RequestRate.range.upperBound)) requests a second")
        }
        // libcurl reads a zero timeout as "no limit": a request could then wait forever.
        guard requestTimeout.seconds >= 0.001 else { throw ValidationError("--request-timeout must be at least 1ms (0 would mean no limit)") }
    }

    func apply(to options: inout RunOptions) {
        options.concurrency = concurrency
        options.requestsPerSecond = rateLimit
        options.policy = VerificationPolicy(
            maximumAttempts: maxAttempts, requestTimeout: requestTimeout.duration, excludeOldTransactions: excludeOldTransactions)
    }

    /// Apple's addresses; each one must be `https://`, or `http://` on loopback (the simulator),
    /// so that a typo cannot send the shared secret in clear.
    func endpoints() throws -> VerifyReceiptClient.Endpoints {
        let environment = ProcessInfo.processInfo.environment
        let endpoints = VerifyReceiptClient.Endpoints(
            production: appleProductionURL ?? environment["APPLE_PRODUCTION_URL"].flatMap { $0.isEmpty ? nil : $0 }
                ?? VerifyReceiptClient.Endpoints.apple.production,
            sandbox: appleSandboxURL ?? environment["APPLE_SANDBOX_URL"].flatMap { $0.isEmpty ? nil : $0 }
                ?? VerifyReceiptClient.Endpoints.apple.sandbox)
        try AppleURL.require(endpoints.production, name: "the production URL (--apple-production-url, APPLE_PRODUCTION_URL)")
        try AppleURL.require(endpoints.sandbox, name: "the sandbox URL (--apple-sandbox-url, APPLE_SANDBOX_URL)")
        return endpoints
    }

    func sharedSecret() throws -> String {
        if let sharedSecretFile {
            let text = try SecretFile.read(sharedSecretFile, what: "the shared secret file")
            let secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !secret.isEmpty else { throw ConfigurationError("the shared secret file \(sharedSecretFile) is empty") }
            return secret
        }
        guard let secret = ProcessInfo.processInfo.environment["APPLE_SHARED_SECRET"], !secret.isEmpty else {
            throw ConfigurationError("no shared secret: set APPLE_SHARED_SECRET or pass --shared-secret-file")
        }
        return secret
    }

}
