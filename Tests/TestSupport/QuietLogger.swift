import Locking
import Logging

extension Logger {
    /// A logger that writes nothing, for libraries under test that take the caller's logger.
    public static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
}

/// Keeps every message logged through it, for a test that asserts what a library said.
public final class LogRecorder: Sendable {
    private let recorded = Locked<[(level: Logger.Level, message: String, metadata: String)]>([])

    public init() {}

    public var logger: Logger {
        Logger(label: "test") { _ in Handler(recorder: self) }
    }

    public var messages: [(level: Logger.Level, message: String, metadata: String)] { recorded.withLock { $0 } }

    struct Handler: LogHandler {
        let recorder: LogRecorder
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let metadata = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            recorder.recorded.withLock { $0.append((event.level, "\(event.message)", metadata)) }
        }
    }
}
