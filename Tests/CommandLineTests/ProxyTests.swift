import Foundation
import Postgres
import Testing
import TestSupport
@testable import WorldSupport

/// Apple's traffic goes where the configuration says and nowhere else (docs/configuration.md,
/// "`run` and `backfill`"): libcurl would follow `http_proxy`, `HTTPS_PROXY` and `ALL_PROXY` from
/// the environment, and a request to a loopback simulator carrying the shared secret in clear
/// would go to whatever proxy a host's profile names; it would also write TLS keys to
/// `SSLKEYLOGFILE`. Neither happens; `--apple-proxy` is the one way to a proxy.
@Suite struct ProxyTests {
    @Test func theEnvironmentsProxiesAndKeyLogAreNeverUsedOnlyApplesProxyIs() async throws {
        let listener = try ListenerProcess()
        defer { listener.stop() }
        try await RunWorld.with("proxy") { world in
            try await RunWorld.populate(world, count: 3)
            let keyLog = world.reportRoot.appending(path: "keys.log")
            var environment = RunWorld.environment(world)
            for variable in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
                environment[variable] = "http://127.0.0.1:\(listener.port)"
            }
            environment["SSLKEYLOGFILE"] = keyLog.path
            let direct = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.appending(path: "direct").path], environment: environment)
            #expect(direct.status == 0, "\(direct.stderr.suffix(800))")
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'verified'") == 3)
            #expect(listener.connections == 0)
            #expect(!FileManager.default.fileExists(atPath: keyLog.path))

            // A TLS handshake (a server no root vouches for: the keys of its first steps exist all the same).
            let tls = try TLSServerProcess()
            defer { tls.stop() }
            try await world.connection.execute("UPDATE iap.app_receipts SET last_verified_at = NULL")
            environment["APPLE_PRODUCTION_URL"] = tls.url
            let handshake = try await CLIProcess.run(
                ["run", "--max-attempts", "1", "--report-dir", world.reportRoot.appending(path: "tls").path], environment: environment)
            #expect(handshake.status == 0, "\(handshake.stderr.suffix(800))")
            #expect(!FileManager.default.fileExists(atPath: keyLog.path), "TLS keys were written to SSLKEYLOGFILE")

            // Named, the proxy is used: the listener, which answers nothing, sees every attempt.
            try await world.connection.execute("UPDATE iap.app_receipts SET last_verified_at = NULL, next_attempt_at = NULL")
            let proxied = try await CLIProcess.run(
                ["run", "--apple-proxy", "http://127.0.0.1:\(listener.port)", "--max-attempts", "1",
                 "--report-dir", world.reportRoot.appending(path: "proxied").path],
                environment: RunWorld.environment(world))
            #expect(proxied.status == 0, "\(proxied.stderr.suffix(800))")
            #expect(listener.connections > 0)
            // A proxy that is no URL is refused before anything is asked.
            let bad = try await CLIProcess.run(["run", "--apple-proxy", "ftp://proxy.example"], environment: RunWorld.environment(world))
            #expect(bad.status == 2 && bad.stderr.contains("--apple-proxy"), "\(bad.stderr.suffix(400))")
            var badVariable = RunWorld.environment(world)
            badVariable["APPLE_PROXY"] = "socks4://proxy.example"
            let refused = try await CLIProcess.run(["run"], environment: badVariable)
            #expect(refused.status == 2 && refused.stderr.contains("APPLE_PROXY") && !refused.stderr.contains("proxy.example"), "\(refused.stderr.suffix(400))")
        }
    }
}
