import Foundation
import Reconciliation

/// Where Apple's secrets and answers may travel (docs/guarantees.md, "Hostile input").
public enum AppleURL {
    /// Why a URL was refused, in words for the operator.
    public struct Refused: Error, CustomStringConvertible {
        public var description: String
    }

    /// `https://` to any host; `http://` only to loopback, where the simulator runs: an IPv4 literal
    /// in 127.0.0.0/8 written as four decimal parts, `[::1]`, or the host `localhost` itself.
    /// Userinfo, backslashes, percent-escapes and anything else that libcurl and this check could
    /// read differently is refused, for both schemes: the secret goes where the check looked.
    public static func check(_ text: String, name: String) throws {
        guard let (scheme, host) = parse(text) else { throw Refused(description: "\(name) is not a URL this job accepts (scheme://host[:port]/path, no user name)") }
        switch scheme {
        case "https": return
        case "http" where isLoopback(host: host): return
        case "http": throw Refused(description: "\(name) is http:// to \(DisplayText.escaped(host)): refused, the shared secret would travel in clear (http:// is allowed on loopback only, for the simulator)")
        default: throw Refused(description: "\(name) must be https://")
        }
    }

    /// The scheme (lowercased) and the host as written, or nil for anything but `scheme://authority[/...]`
    /// with a plain host: no userinfo, no backslash, no escapes, no spaces or controls.
    public static func parse(_ text: String) -> (scheme: String, host: String)? {
        guard let separator = text.range(of: "://") else { return nil }
        let scheme = text[..<separator.lowerBound].lowercased()
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0 == "+") }) else { return nil }
        let rest = text[separator.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F && $0 != "\\" }),
              !authority.contains("@"), !authority.contains("%"), !authority.isEmpty
        else { return nil }
        let host: Substring
        let port: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[...close]
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { return nil }
            port = after.isEmpty ? nil : after.dropFirst()
        } else {
            let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2, !parts[0].isEmpty else { return nil }
            host = parts[0]
            port = parts.count == 2 ? parts[1] : nil
        }
        if let port {
            guard (1...5).contains(port.count), port.allSatisfy(\.isASCIIDigit), let number = Int(port), number <= 65_535 else { return nil }
        }
        guard host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-.[]:".contains($0)) }) else { return nil }
        return (scheme, host.lowercased())
    }

    /// `localhost`, `[::1]` (any spelling of that address) or four decimal parts starting 127.
    public static func isLoopback(host: String) -> Bool {
        if host == "localhost" { return true }
        if host.hasPrefix("[") && host.hasSuffix("]") {
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(host.dropFirst().dropLast()), &address) == 1 else { return false }
            return withUnsafeBytes(of: &address) { $0.elementsEqual([UInt8](repeating: 0, count: 15) + [1]) }
        }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.allSatisfy({ part in
            (1...3).contains(part.count) && part.allSatisfy(\.isASCIIDigit) && (part.count == 1 || part.first != "0") && (Int(part) ?? 256) <= 255
        }) else { return false }
        return parts[0] == "127"
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

