import CLibPQ
import Foundation

extension PostgresConnection {
    /// Loads rows with `COPY table (columns) FROM STDIN`: one round trip for any number of rows,
    /// the fastest way into PostgreSQL. Values use the same text forms as bound parameters.
    /// Returns the number of rows copied.
    ///
    /// The table and the columns are the one place a name is spliced into SQL text (a name cannot
    /// be bound): each must be a plain lower-case identifier, the table optionally with its
    /// schema (`iap.app_receipts`), or nothing is sent.
    @discardableResult
    public func copy(into table: String, columns: [String], rows: [[PostgresBind]]) async throws(PostgresError) -> Int {
        for name in [table] + columns where !Self.isPlainIdentifier(name, qualified: name == table) {
            throw PostgresError(code: .badIdentifier, phase: .copy, message: "not a plain identifier: \(name.debugDescription)")
        }
        guard !columns.isEmpty else { throw PostgresError(code: .badIdentifier, phase: .copy, message: "no column to copy into") }
        let statement = "COPY \(table) (\(columns.joined(separator: ", "))) FROM STDIN"
        return try await onThread { handle in try handle.copyIn(statement, rows: rows) }
    }
}

extension PostgresConnection {
    /// `[a-z_][a-z0-9_]*`, at most 63 bytes (PostgreSQL's limit), and with `qualified` one
    /// `schema.` before it: the closed set of names `copy` splices.
    static func isPlainIdentifier(_ name: String, qualified: Bool) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 1 || (qualified && parts.count == 2) else { return false }
        return parts.allSatisfy { part in
            guard let first = part.utf8.first, part.utf8.count <= 63, first == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first)
            else { return false }
            return part.utf8.allSatisfy { $0 == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
        }
    }
}

extension ConnectionHandle {
    func copyIn(_ statement: String, rows: [[PostgresBind]]) throws(PostgresError) -> Int {
        let connection = try usableConnection()
        guard let start = PQexec(connection, statement) else { throw dropIfLost(lostOrFailed(connection, phase: .copy)) }
        let status = PQresultStatus(start)
        if status != PGRES_COPY_IN {
            defer { PQclear(start) }
            throw dropIfLost(Self.error(from: start, connection: connection, phase: .copy))
        }
        PQclear(start)

        var buffer = [UInt8]()
        buffer.reserveCapacity(1 << 16)
        var sendFailure: String?
        func flush() {
            guard !buffer.isEmpty, sendFailure == nil else { return }
            let sent = buffer.withUnsafeBufferPointer { bytes in
                bytes.withMemoryRebound(to: CChar.self) { PQputCopyData(connection, $0.baseAddress, Int32($0.count)) }
            }
            if sent != 1 { sendFailure = String(cString: PQerrorMessage(connection)) }
            buffer.removeAll(keepingCapacity: true)
        }
        for row in rows {
            for (index, value) in row.enumerated() {
                if index > 0 { buffer.append(0x09) }
                switch value.value {
                case .text(let text): Self.appendCopyEscaped(text, to: &buffer)
                case nil: buffer.append(contentsOf: [0x5C, 0x4E])  // \N
                case .binary: preconditionFailure("COPY's text format takes text values; bind arrays to statements")
                }
            }
            buffer.append(0x0A)
            if buffer.count >= 1 << 16 { flush() }
        }
        flush()
        PQputCopyEnd(connection, sendFailure)

        var failure: PostgresError?
        var copied = 0
        while let result = PQgetResult(connection) {
            if PQresultStatus(result) == PGRES_COMMAND_OK {
                copied = Int(String(cString: PQcmdTuples(result))) ?? 0
            } else if failure == nil {
                failure = Self.error(from: result, connection: connection, phase: .copy)
            }
            PQclear(result)
        }
        if let failure { throw dropIfLost(failure) }
        if let sendFailure {
            throw dropIfLost(PostgresError(code: .connectionLost, phase: .copy, message: sendFailure))
        }
        return copied
    }

    /// COPY's text format: backslash, tab, newline and carriage return are escaped.
    static func appendCopyEscaped(_ text: String, to buffer: inout [UInt8]) {
        for byte in text.utf8 {
            switch byte {
            case 0x5C: buffer.append(contentsOf: [0x5C, 0x5C])
            case 0x09: buffer.append(contentsOf: [0x5C, 0x74])
            case 0x0A: buffer.append(contentsOf: [0x5C, 0x6E])
            case 0x0D: buffer.append(contentsOf: [0x5C, 0x72])
            default: buffer.append(byte)
            }
        }
    }
}
