import ArgumentParser
import Foundation
import Postgres
import Storage

struct IngestNotificationsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ingest-notifications",
        abstract: "Stores App Store Server Notification bodies (v1 and V2) into iap.notifications, for apps that keep them elsewhere.",
        discussion: """
            Each FILE holds one JSON object, or JSON lines (one object per line); "-" or no FILE reads JSON \
            lines from stdin. Every input that parses as a JSON object is stored as received; each one that \
            does not is reported with its file and line number, and nothing of it is stored. Exits 0 when all \
            were stored, 1 when any was not. The next run processes what was stored.

            A V2 body ({"signedPayload": ...}) that is already stored, byte for byte, is not stored again \
            (Apple sends a notification again until the app server answers); it is counted as already \
            stored. Nothing is verified here: every run verifies each V2 notification before using it.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "Files to read (default: stdin).")
    var files: [String] = []

    func run() async throws {
        let logger = logging.bootstrap()
        var rejected: [String] = []
        var stored = 0
        var alreadyStored = 0
        try await runReportingErrors(logger: logger) {
            let store = NotificationStore(connection: try await PostgresConnection.connect(try database.connectionString()))
            var pending: [(source: String, body: String)] = []
            func flush() async throws {
                guard !pending.isEmpty else { return }
                do {
                    // One statement: the page is stored whole or not at all.
                    let new = try await store.insert(bodies: pending.map(\.body))
                    stored += new
                    alreadyStored += pending.count - new
                } catch let error as PostgresError where !error.isConnectionError {
                    // PostgreSQL refused something JSON allows (a \u0000 in a string): find which, keep the rest.
                    for item in pending {
                        do {
                            let new = try await store.insert(bodies: [item.body])
                            stored += new
                            alreadyStored += 1 - new
                        } catch let error as PostgresError where !error.isConnectionError {
                            rejected.append("\(item.source): PostgreSQL cannot store it as jsonb (\(error.message))")
                        }
                    }
                }
                pending.removeAll()
            }
            for input in files.isEmpty ? ["-"] : files {
                let name = input == "-" ? "stdin" : input
                let data: Data
                if input == "-" {
                    data = FileHandle.standardInput.readDataToEndOfFile()
                } else {
                    guard let contents = FileManager.default.contents(atPath: input) else {
                        rejected.append("\(name): cannot read the file")
                        continue
                    }
                    data = contents
                }
                for item in Self.objects(in: data, source: name) {
                    switch item {
                    case .object(let source, let body):
                        pending.append((source, body))
                        if pending.count >= 500 { try await flush() }
                    case .notAnObject(let source):
                        rejected.append("\(source): not a JSON object")
                    }
                }
            }
            try await flush()
            await store.close()
        }
        print("Stored \(stored) notification(s)." + (alreadyStored > 0 ? " \(alreadyStored) already stored, not stored again." : ""))
        for line in rejected { FileHandle.standardError.write(Data("not stored: \(line)\n".utf8)) }
        if !rejected.isEmpty {
            print("\(rejected.count) input(s) not stored: see stderr.")
            throw ExitStatus.failed
        }
    }

    enum Item {
        case object(source: String, body: String)
        case notAnObject(source: String)
    }

    /// A whole file that is one JSON object, else its non-empty lines, each with `file:line`.
    static func objects(in data: Data, source: String) -> [Item] {
        var bytes = data
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        if isObject(bytes) {
            return [.object(source: "\(source):1", body: String(decoding: bytes, as: UTF8.self))]
        }
        var items: [Item] = []
        for (index, line) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
            let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !text.isEmpty else { continue }
            let location = "\(source):\(index + 1)"
            items.append(isObject(Data(text.utf8)) ? .object(source: location, body: text) : .notAnObject(source: location))
        }
        return items
    }

    static func isObject(_ data: Data) -> Bool {
        (try? JSONSerialization.jsonObject(with: data)) is [String: Any]
    }
}
