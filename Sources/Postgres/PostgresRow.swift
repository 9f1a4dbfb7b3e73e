/// The names and types of a result's columns, shared by all its rows.
public final class PostgresColumns: Sendable {
    public let names: [String]
    public let types: [PostgresType]
    let indexByName: [String: Int]

    init(names: [String], types: [PostgresType]) {
        self.names = names
        self.types = types
        var index: [String: Int] = [:]
        for (position, name) in names.enumerated() where index[name] == nil { index[name] = position }
        self.indexByName = index
    }
}

/// One row of a result, in PostgreSQL's text format, decoded column by column on demand.
public struct PostgresRow: Sendable {
    public let columns: PostgresColumns
    /// The text of each column; nil is SQL NULL.
    public let values: [String?]

    init(columns: PostgresColumns, values: [String?]) {
        self.columns = columns
        self.values = values
    }

    /// Decodes the column named `column`. A NULL decodes only into an `Optional`.
    /// Errors name the column and the types, never the value.
    public func decode<Value: PostgresDecodable>(_ column: String, as type: Value.Type = Value.self) throws(PostgresError) -> Value {
        guard let index = columns.indexByName[column] else {
            throw PostgresError(
                code: .decoding, phase: .decode, message: "the result has no column \"\(column)\"", column: column)
        }
        return try decode(at: index, as: type)
    }

    /// Decodes the column at `index` (0-based).
    public func decode<Value: PostgresDecodable>(at index: Int, as type: Value.Type = Value.self) throws(PostgresError) -> Value {
        let name = columns.names[index]
        guard let text = values[index] else {
            if let optional = Value.self as? any PostgresOptionalDecodable.Type, let none = optional.nullValue as? Value {
                return none
            }
            throw PostgresError(
                code: .decoding, phase: .decode, message: "NULL cannot be decoded as \(Value.self)", column: name)
        }
        do {
            return try Value.decode(text: text[...], type: columns.types[index])
        } catch {
            throw PostgresError(code: .decoding, phase: .decode, message: error.reason, column: name)
        }
    }
}

/// Lets a NULL decode as `nil` without knowing the wrapped type.
protocol PostgresOptionalDecodable {
    static var nullValue: Self { get }
}

extension Optional: PostgresOptionalDecodable {
    static var nullValue: Self { nil }
}
