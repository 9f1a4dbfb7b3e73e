import Logging

extension Logger {
    /// A logger that writes nothing, for libraries under test that take the caller's logger.
    public static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
}
