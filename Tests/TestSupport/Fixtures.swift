import Foundation

/// Reads files from `Tests/Fixtures` (real data other people published: see its PROVENANCE.md).
public enum Fixtures {
    public static func data(_ path: String) throws -> Data {
        try Data(contentsOf: TestPaths.fixtures.appending(path: path))
    }

    public static func bytes(_ path: String) throws -> [UInt8] {
        Array(try data(path))
    }

    /// The App Store Connect test key copied to `url` with mode 0600: the job refuses a key file
    /// that group or others can read (docs/guarantees.md, "Hostile input"), and a clone checks it out 0644.
    @discardableResult
    public static func privateKey(at url: URL) throws -> URL {
        try data("asapi/apple-lib/swift/certs/testSigningKey.p8").write(to: url)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        return url
    }

    public static func files(in directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: TestPaths.fixtures.appending(path: directory).path).sorted()
    }
}

extension Date {
    /// `Date(ms: 1500975210000)`: a time written as Apple's `*_ms` value.
    public init(ms: Int64) {
        self.init(timeIntervalSince1970: Double(ms) / 1_000)
    }
}
