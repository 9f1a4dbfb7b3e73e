import ArgumentParser
import Logging
import Postgres

/// The exit statuses (docs/operating.md, "Exit status").
enum ExitStatus {
    static let completed = ExitCode(0)
    static let failed = ExitCode(1)
    static let configuration = ExitCode(2)
    static let aborted = ExitCode(3)
    static let locked = ExitCode(4)
}

/// Runs a command's work, logs a failure once, and maps it to an exit status.
func runReportingErrors(logger: Logger, _ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch where StopSignals.isEnding {
        // A stop signal ends this process, and cancelled the statement that failed here.
        await StopSignals.waitToEnd()
    } catch let exit as ExitCode {
        throw exit
    } catch let error as ConfigurationError {
        logger.error("configuration.invalid", metadata: ["error": "\(error)"])
        throw ExitStatus.configuration
    } catch let error as PostgresError where error.code == .badConnectionString {
        logger.error("configuration.invalid", metadata: ["error": "\(error)"])
        throw ExitStatus.configuration
    } catch let error as PostgresError where error.code == .connectionFailed {
        logger.error("database.unreachable", metadata: ["error": "\(error)"])
        throw ExitStatus.failed
    } catch {
        logger.error("command.failed", metadata: ["error": "\(error)"])
        throw ExitStatus.failed
    }
}
