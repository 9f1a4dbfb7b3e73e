import Foundation

/// `receipt-reconciler` run as a real process, the way cron runs it.
public final class CLIProcess: @unchecked Sendable {
    // `process` is only touched through its own thread-safe API; the pipes are read once at exit.
    public let process = Process()
    private let output = Pipe()
    private let errors = Pipe()
    private var collected: (stdout: String, stderr: String)?

    public init(_ arguments: [String], environment: [String: String]) throws {
        process.executableURL = TestPaths.binaries.appending(path: "receipt-reconciler")
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        for key in ["DATABASE_URL", "APPLE_SHARED_SECRET", "APPLE_PRODUCTION_URL", "APPLE_SANDBOX_URL"] { merged[key] = nil }
        merged.merge(environment) { $1 }
        process.environment = merged
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    /// Runs to the end and returns the exit status with everything printed.
    public static func run(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let cli = try CLIProcess(arguments, environment: environment)
        return try await cli.wait()
    }

    public func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    public func wait() async throws -> (status: Int32, stdout: String, stderr: String) {
        // Read the pipes while waiting, so a chatty process never blocks on a full pipe.
        async let out = Task.detached { [output] in String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }.value
        async let err = Task.detached { [errors] in String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }.value
        let (stdout, stderr) = await (out, err)
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        return (process.terminationStatus, stdout, stderr)
    }
}
