import Foundation
import Postgres
import Throttling

/// A database of its own for one test, created in the throwaway cluster that `scripts/test`
/// starts, so tests can run in parallel without sharing tables.
public struct TestDatabase: Sendable {
    /// libpq connection string of the new database.
    public let connectionString: String
    public let name: String

    /// The cluster's admin connection string, exported by `scripts/test`.
    public static var adminConnectionString: String {
        get throws {
            guard let url = ProcessInfo.processInfo.environment["RR_TEST_ADMIN_URL"], !url.isEmpty else {
                throw TestSetupError(
                    description: "RR_TEST_ADMIN_URL is not set: run the tests with scripts/test, which starts PostgreSQL")
            }
            return url
        }
    }

    /// A few creations at a time: the suite starts a hundred tests at once, and each new
    /// database's first session builds its catalog cache from nothing. All of them at once on two
    /// cores kept sessions waiting past libpq's 10 s connect timeout (CI, 2026-11-27).
    static let creations = ConcurrencyLimiter(limit: 4)

    /// Creates an empty database named after the test, and opens its first session (so the
    /// catalog cache the test's own sessions read is built, one creation at a time per few).
    public static func create(_ label: String = "t") async throws -> TestDatabase {
        await creations.acquire()
        defer { creations.release() }
        let admin = try await connectRetrying(try adminConnectionString)
        defer { Task { await admin.close() } }
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let safeLabel = label.lowercased().filter { $0.isLetter || $0.isNumber }.prefix(30)
        let name = "rr_\(safeLabel)_\(suffix)"
        try await admin.execute("CREATE DATABASE \(unescaped: name)")
        let database = TestDatabase(connectionString: try adminConnectionString.replacingDatabase(with: name), name: name)
        await (try database.connect()).close()
        return database
    }

    public func connect() async throws -> PostgresConnection {
        try await Self.connectRetrying(connectionString)
    }

    /// A test's connection, tried again (three times at most) when the loaded machine's server
    /// did not answer within libpq's connect timeout: a test proves nothing by failing there.
    static func connectRetrying(_ connectionString: String) async throws -> PostgresConnection {
        var attempt = 1
        while true {
            do {
                return try await PostgresConnection.connect(connectionString)
            } catch {
                guard attempt < 3, "\(error)".contains(": timed out") else { throw error }
                attempt += 1
            }
        }
    }

    /// Drops the database, ending any session still in it.
    public func drop() async throws {
        let admin = try await Self.connectRetrying(try Self.adminConnectionString)
        try await admin.execute("DROP DATABASE IF EXISTS \(unescaped: name) WITH (FORCE)")
        await admin.close()
    }
}

/// True in the thread-sanitized run (`RR_SANITIZE=thread scripts/test`): everything runs several
/// times slower there, so tests that measure time or overlap prove nothing and are left to the plain run.
public let isSanitizedRun = ProcessInfo.processInfo.environment["RR_SANITIZE"] != nil

public struct TestSetupError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

extension String {
    /// `host=... dbname=postgres` with dbname replaced (key/value form, as scripts/test writes it).
    func replacingDatabase(with database: String) -> String {
        let parts = split(separator: " ").filter { !$0.hasPrefix("dbname=") }
        return (parts + ["dbname=\(database)"]).joined(separator: " ")
    }
}

/// Paths of the fixtures and of the built executables.
public enum TestPaths {
    /// `Tests/Fixtures`: the repository's own copy, so a clone alone runs every test.
    public static var fixtures: URL {
        repositoryRoot.appending(path: "Tests/Fixtures")
    }

    /// Every Swift file and C header under `Sources/`, path (relative to it) and text: what the
    /// house's lints read.
    public static var sources: [(path: String, text: String)] {
        get throws {
            let root = repositoryRoot.appending(path: "Sources")
            let enumerator = FileManager.default.enumerator(atPath: root.path)!
            var files: [(String, String)] = []
            while let path = enumerator.nextObject() as? String {
                guard path.hasSuffix(".swift") || path.hasSuffix(".h") else { continue }
                files.append((path, try String(contentsOf: root.appending(path: path), encoding: .utf8)))
            }
            return files
        }
    }

    /// Every UTF-8 file of the repository, path (relative to its root) and text, less the build's,
    /// git's, the fixtures (other people's words) and the fuzz corpora: what the lints of the
    /// docs and citations read.
    public static var repositoryTexts: [(path: String, text: String)] {
        let enumerator = FileManager.default.enumerator(atPath: repositoryRoot.path)!
        var files: [(String, String)] = []
        while let path = enumerator.nextObject() as? String {
            if path.hasPrefix(".build") || path.hasPrefix(".git") || path.hasPrefix("Tests/Fixtures") || path.hasPrefix("FuzzTesting") {
                enumerator.skipDescendants()
                continue
            }
            guard let text = try? String(contentsOf: repositoryRoot.appending(path: path), encoding: .utf8) else { continue }
            files.append((path, text))
        }
        return files
    }

    public static var repositoryRoot: URL {
        var url = URL(filePath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }

    /// The directory `swift build` put the executables in (that of the test bundle).
    public static var binaries: URL {
        var url = URL(filePath: CommandLine.arguments[0]).standardizedFileURL
        while url.pathComponents.count > 1 && !FileManager.default.fileExists(atPath: url.appending(path: "receipt-reconciler").path) {
            url.deleteLastPathComponent()
        }
        return url
    }
}
