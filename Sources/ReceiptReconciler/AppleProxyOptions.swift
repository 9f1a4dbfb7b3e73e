import ArgumentParser
import Foundation

/// The one way Apple's traffic reaches a proxy (docs/configuration.md, "`run` and `backfill`"):
/// named here, never taken from `http_proxy`, `HTTPS_PROXY` or `ALL_PROXY`, which a host's
/// profile may set for other programs (a request to a loopback simulator carries the shared
/// secret in clear).
struct AppleProxyOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "The proxy for every request to Apple (default: $APPLE_PROXY, else none). http://, https://, socks5:// or socks5h://; the environment's http_proxy, HTTPS_PROXY and ALL_PROXY are never used.",
        valueName: "url"))
    var appleProxy: String?

    /// Its value is never written anywhere: a proxy's URL may hold a password.
    func validate() throws {
        guard let given = proxy() else { return }
        guard let url = URL(string: given), let scheme = url.scheme?.lowercased(), ["http", "https", "socks5", "socks5h"].contains(scheme),
              url.host != nil else {
            throw ValidationError("--apple-proxy (or APPLE_PROXY): not an http://, https://, socks5:// or socks5h:// URL with a host")
        }
    }

    /// The proxy named, or nil for none.
    func proxy() -> String? {
        if let appleProxy, !appleProxy.isEmpty { return appleProxy }
        return ProcessInfo.processInfo.environment["APPLE_PROXY"].flatMap { $0.isEmpty ? nil : $0 }
    }
}
