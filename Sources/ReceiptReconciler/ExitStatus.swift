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
    } catch let error as PostgresError where error.isMissingSchema {
        // A database never migrated, or migrated by an older binary: no retry mends it.
        logger.error("database.schema_missing", metadata: [
            "error": "\(error)", "hint": "the job's schema is missing or older than this binary: run 'receipt-reconciler migrate' first",
        ])
        throw ExitStatus.configuration
    } catch let error as PostgresError where error.sqlState == "42501" {
        logger.error("database.permission_denied", metadata: [
            "error": "\(error)",
            "hint": "the job's role lacks a privilege: grant what docs/adoption.md, 'A role of its own', grants (your triggers' tables too)",
        ])
        throw ExitStatus.failed
    } catch {
        logger.error("command.failed", metadata: ["error": "\(error)"])
        throw ExitStatus.failed
    }
}

extension PostgresError {
    /// A table, column, function or schema of the job's own (`iap`) that the database lacks.
    var isMissingSchema: Bool {
        guard let sqlState, ["3F000", "42P01", "42703", "42883"].contains(sqlState) else { return false }
        return message.contains("iap")
    }
}
