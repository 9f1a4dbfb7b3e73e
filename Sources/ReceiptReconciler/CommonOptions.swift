import ArgumentParser
import CoreFoundation
// Swift 6's member-import check attributes Glibc's `stat` to CDispatch on Linux once this module
// has some number of files (a compiler fault): naming the module it blames keeps SecretFile compiling.
internal import CDispatch
import Foundation
import Logging

/// Where the database is. Read from `--database-url`, else `DATABASE_URL`.
struct DatabaseOptions: ParsableArguments {
    @Option(
        name: .customLong("database-url"),
        help: ArgumentHelp(
            "libpq connection string or postgresql:// URI (default: $DATABASE_URL).",
            discussion: "Prefer the environment variable: a password on the command line is visible in `ps`.",
            valueName: "url"))
    var databaseURL: String?

    /// The connection string, or a usage error naming what is missing.
    func connectionString() throws -> String {
        if let databaseURL, !databaseURL.isEmpty { return databaseURL }
        if let url = ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty { return url }
        throw ConfigurationError("no database: set DATABASE_URL or pass --database-url")
    }
}

/// How logs look. Logs go to stderr; stdout is for summaries and reports.
struct LoggingOptions: ParsableArguments {
    enum Format: String, ExpressibleByArgument, CaseIterable {
        case text, json
    }

    @Option(help: "Log format: text or json (one object per line).")
    var logFormat: Format = .text

    @Option(help: "Least severe level logged: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
    }

    func bootstrap() -> Logger {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        let format = logFormat
        LoggingSystem.bootstrap { label in
            var handler = StandardErrorLogHandler(label: label, format: format)
            handler.logLevel = level
            return handler
        }
        return Logger(label: "receipt-reconciler")
    }
}

/// A configuration problem: exit status 2, with a message that says what to set.
struct ConfigurationError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A secret kept in a file (the shared secret, the App Store Connect `.p8` key): read only when
/// no one but its owner can read or write it, as ssh reads a private key. A key readable by the
/// group or by everyone has leaked already, or will on the next backup; refusing it makes the
/// operator fix the mode now rather than learn of the leak later.
///
/// One exception, PostgreSQL's for its server key: a file owned by root may also be read by its
/// group (0440 or 0640 at most), root handing the secret to the service's own group. It is how
/// Kubernetes mounts a Secret for a pod that does not run as root: owned by root, its group the
/// pod's `fsGroup`, mode 0400 plus group read (docs/operating.md, "The image").
enum SecretFile {
    static func read(_ path: String, what: String) throws -> String {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw ConfigurationError("cannot read \(what) \(path): \(String(cString: strerror(errno)))")
        }
        let mode = status.st_mode & 0o777
        // Root's file: group read allowed, group write and everything for others not.
        let forbidden: mode_t = status.st_uid == 0 ? 0o037 : 0o077
        guard mode & forbidden == 0 else {
            throw ConfigurationError(
                "\(what) \(path) is open to group or others (mode \(String(mode, radix: 8))): refused. Run: chmod 600 \(path)")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError("cannot read \(what) \(path)")
        }
        return text
    }
}
