import Logging
import Storage

/// `body`, run again after the database failures that running it again may cure
/// (`DatabaseRetry`), each retry logged as `database.retrying`.
func withDatabaseRetry<Result>(logger: Logger, _ body: () async throws -> Result) async throws -> Result {
    try await DatabaseRetry.run(logger: logger, body)
}
