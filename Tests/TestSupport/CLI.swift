import Foundation
import Locking

/// `receipt-reconciler` run as a real process, the way cron runs it.
///
/// Its stdout and stderr are drained from the start, each on a thread of its own: a chatty run
/// never blocks on a full pipe while the test waits for something else, and no thread of Swift's
/// cooperative pool (two on a two-core machine) is ever held in a blocking read.
public final class CLIProcess: @unchecked Sendable {
    // `process` is only touched through its own thread-safe API.
    public let process = Process()
    private let stdout: PipeDrain
    private let stderr: PipeDrain

    /// `parentBlocksNoSignal`: started as a shell or cron starts it, with no signal blocked. By
    /// default it inherits the mask of the test thread that starts it, which blocks every signal.
    /// `standardInput`: what it reads on stdin (by default nothing: /dev/null).
    ///
    /// `acceptsFirstNight`: a `run` or `backfill` gets `--first-night`. The test worlds start with
    /// an empty `iap.entitlements`, which the job refuses for a first night without it; the tests of
    /// that refusal (FirstNightGuardTests) pass false.
    public init(_ arguments: [String], environment: [String: String], parentBlocksNoSignal: Bool = false,
                standardInput: Data? = nil, acceptsFirstNight: Bool = true) throws {
        let binary = TestPaths.binaries.appending(path: "receipt-reconciler")
        var arguments = arguments
        if acceptsFirstNight, ["run", "backfill"].contains(arguments.first), !arguments.contains("--help") {
            arguments.append("--first-night")
        }
        if parentBlocksNoSignal {
            // Python clears the mask and becomes the CLI (exec keeps the pid the test signals).
            let script = """
                import os, signal, sys
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                os.execv(sys.argv[1], sys.argv[1:])
                """
            process.executableURL = URL(filePath: "/usr/bin/env")
            process.arguments = ["python3", "-c", script, binary.path] + arguments
        } else {
            process.executableURL = binary
            process.arguments = arguments
        }
        var merged = ProcessInfo.processInfo.environment
        for key in ["DATABASE_URL", "APPLE_SHARED_SECRET", "APPLE_PRODUCTION_URL", "APPLE_SANDBOX_URL"] { merged[key] = nil }
        merged.merge(environment) { $1 }
        process.environment = merged
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        let input = standardInput.map { _ in Pipe() }
        process.standardInput = input ?? FileHandle.nullDevice
        try process.run()
        if let input, let standardInput {
            // Written on a thread of its own: a large input must not wait on the pipe in a cooperative thread.
            Thread.detachNewThread {
                try? input.fileHandleForWriting.write(contentsOf: standardInput)
                try? input.fileHandleForWriting.close()
            }
        }
        stdout = PipeDrain(output.fileHandleForReading)
        stderr = PipeDrain(errors.fileHandleForReading)
    }

    /// Runs to the end and returns the exit status with everything printed.
    public static func run(_ arguments: [String], environment: [String: String], standardInput: Data? = nil,
                           acceptsFirstNight: Bool = true) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        let cli = try CLIProcess(arguments, environment: environment, standardInput: standardInput, acceptsFirstNight: acceptsFirstNight)
        return try await cli.wait()
    }

    /// What it printed on stdout so far.
    public var standardOutputSoFar: String { stdout.text }
    /// What it printed on stderr so far (its logs).
    public var standardErrorSoFar: String { stderr.text }

    public func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    /// Waits for the process to end and returns its status and output. A process still running
    /// after `timeout` is killed and the wait fails with the end of what it printed: a stuck run
    /// fails its test by name instead of hanging the whole suite.
    public func wait(timeout: Duration = .seconds(600)) async throws -> (status: Int32, stdout: String, stderr: String) {
        let deadline = ContinuousClock.now + timeout
        while !(stdout.isFinished && stderr.isFinished) || process.isRunning {
            guard ContinuousClock.now < deadline else {
                kill(process.processIdentifier, SIGKILL)
                throw TestSetupError(description: """
                    \(process.arguments?.first ?? "the CLI") still running after \(timeout); killed. Its stderr ended with: \
                    \(stderr.text.suffix(3000))
                    """)
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return (process.terminationStatus, stdout.text, stderr.text)
    }
}

/// Reads a pipe to its end on a thread of its own.
///
/// Locks with `Locked`, not `Synchronization.Mutex`: the thread sanitizer cannot see a Mutex's
/// futex waits, and reported this drain's `finished` as a race in one whole-suite run of five.
final class PipeDrain: Sendable {
    private let state = Locked<(bytes: Data, finished: Bool)>((Data(), false))

    init(_ handle: FileHandle) {
        let thread = Thread { [self] in
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                state.withLock { $0.bytes.append(chunk) }
            }
            try? handle.close()
            state.withLock { $0.finished = true }
        }
        thread.start()
    }

    var isFinished: Bool { state.withLock { $0.finished } }
    var text: String { state.withLock { String(decoding: $0.bytes, as: UTF8.self) } }
}
