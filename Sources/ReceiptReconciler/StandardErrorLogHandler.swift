import CivilCalendar
import Foundation
import Logging
import Reconciliation

/// Writes one line per log message to stderr, as text or as a JSON object.
struct StandardErrorLogHandler: LogHandler {
    let label: String
    let format: LoggingOptions.Format
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = self.metadata
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        let time = Timestamp.format(Date())
        let line: String
        switch format {
        case .text:
            // One message, one line: values from the database or Apple (an account id with a line
            // feed or ESC) are escaped, so they can neither forge a line nor drive the terminal.
            let fields = merged.sorted { $0.key < $1.key }
                .map { "\(DisplayText.escaped($0.key))=\(DisplayText.escaped("\($0.value)"))" }.joined(separator: " ")
            line = "\(time) \(event.level) \(DisplayText.escaped("\(event.message)"))\(fields.isEmpty ? "" : " " + fields)\n"
        case .json:
            var object: [String: JSONValue] = ["time": .string(time), "level": .string("\(event.level)"), "message": .string("\(event.message)")]
            for (key, value) in merged { object[key] = Self.json(value) }
            line = ((try? ProgramJSON.line(object)) ?? "{}") + "\n"
        }
        FileHandle.standardError.write(Data(line.utf8))
    }

    /// A value as JSON: a count or a duration logged as a number is a JSON number (a Bool a JSON
    /// boolean), so a log query compares numbers, not strings; everything else is a string.
    static func json(_ value: Logger.MetadataValue) -> JSONValue {
        switch value {
        case .string(let text): return .string(text)
        case .stringConvertible(let convertible):
            switch convertible {
            case let flag as Bool: return .bool(flag)
            case let integer as any BinaryInteger: return .integer(Int64(clamping: integer))
            case let number as Double where number.isFinite: return .number(number)
            default: return .string("\(convertible)")
            }
        case .array(let values): return .array(values.map(json))
        case .dictionary(let values): return .object(values.mapValues(json))
        }
    }
}
