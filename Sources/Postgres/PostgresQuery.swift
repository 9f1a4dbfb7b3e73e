import Foundation

/// A SQL statement whose values travel as bound parameters, never inside the SQL text.
///
/// Written as a string literal with interpolations: every interpolated value becomes `$n`.
///
///     let query: PostgresQuery = "SELECT * FROM iap.app_receipts WHERE account_id = \(accountID)"
///     // sql: "SELECT * FROM iap.app_receipts WHERE account_id = $1", binds: [accountID]
///
/// `\(unescaped:)` exists for identifiers the code itself chooses (a cursor name, a table
/// from a fixed list); it must never carry input.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation {
    public var sql: String
    public var binds: [PostgresBind]

    public init(unsafeSQL sql: String, binds: [PostgresBind] = []) {
        self.sql = sql
        self.binds = binds
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        self.init(unsafeSQL: stringInterpolation.sql, binds: stringInterpolation.binds)
    }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [PostgresBind] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        public mutating func appendInterpolation(_ value: some PostgresEncodable) {
            binds.append(PostgresBind(value))
            sql += "$\(binds.count)"
        }

        public mutating func appendInterpolation(_ value: (some PostgresEncodable)?) {
            binds.append(value.map(PostgresBind.init) ?? .null)
            sql += "$\(binds.count)"
        }

        /// A batch column, bound in PostgreSQL's binary format.
        public mutating func appendInterpolation(_ array: PostgresArray) {
            binds.append(PostgresBind(type: array.type, binary: array.bytes))
            sql += "$\(binds.count)"
        }

        /// Splices text into the SQL itself. Only for identifiers chosen by the code, never for input.
        public mutating func appendInterpolation(unescaped text: String) {
            sql += text
        }
    }
}

/// One bound parameter with its type, so the server need not guess: in PostgreSQL's text
/// format, or in its binary format for batch arrays (`PostgresArray`).
public struct PostgresBind: Sendable, Equatable {
    public enum Value: Sendable, Equatable {
        case text(String)
        case binary([UInt8])
    }

    public var type: PostgresType
    /// nil is SQL NULL.
    public var value: Value?

    public init(type: PostgresType, text: String?) {
        self.type = type
        self.value = text.map(Value.text)
    }

    public init(type: PostgresType, binary: [UInt8]) {
        self.type = type
        self.value = .binary(binary)
    }

    public init(_ value: some PostgresEncodable) {
        self.init(type: Swift.type(of: value).postgresType, text: value.postgresText)
    }

    /// The text form; nil for NULL and for a binary value.
    public var text: String? {
        if case .text(let text) = value { text } else { nil }
    }

    public static let null = PostgresBind(type: .unknown, text: nil)
}

/// A type whose values can be bound as a parameter.
public protocol PostgresEncodable: Sendable {
    static var postgresType: PostgresType { get }
    /// The value in PostgreSQL's text input format.
    var postgresText: String { get }
    /// The same text appended to `bytes`: batch binds write hundreds of thousands of values, and
    /// a type that can skip making a `String` for each (a timestamp) says so here.
    func appendPostgresText(to bytes: inout [UInt8])
}

extension PostgresEncodable {
    public func appendPostgresText(to bytes: inout [UInt8]) {
        bytes.append(contentsOf: postgresText.utf8)
    }
}

/// The type OIDs the code binds and decodes.
public struct PostgresType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let unknown = PostgresType(rawValue: 0)
    public static let bool = PostgresType(rawValue: 16)
    public static let bytea = PostgresType(rawValue: 17)
    public static let int8 = PostgresType(rawValue: 20)
    public static let int2 = PostgresType(rawValue: 21)
    public static let int4 = PostgresType(rawValue: 23)
    public static let text = PostgresType(rawValue: 25)
    public static let oid = PostgresType(rawValue: 26)
    public static let json = PostgresType(rawValue: 114)
    public static let float4 = PostgresType(rawValue: 700)
    public static let float8 = PostgresType(rawValue: 701)
    public static let varchar = PostgresType(rawValue: 1043)
    public static let timestamp = PostgresType(rawValue: 1114)
    public static let timestamptz = PostgresType(rawValue: 1184)
    public static let interval = PostgresType(rawValue: 1186)
    public static let numeric = PostgresType(rawValue: 1700)
    public static let jsonb = PostgresType(rawValue: 3802)
    public static let name = PostgresType(rawValue: 19)
    public static let textArray = PostgresType(rawValue: 1009)
    public static let int8Array = PostgresType(rawValue: 1016)
    public static let int4Array = PostgresType(rawValue: 1007)
    public static let boolArray = PostgresType(rawValue: 1000)
    public static let timestamptzArray = PostgresType(rawValue: 1185)

    public var description: String {
        switch self {
        case .bool: "bool"
        case .bytea: "bytea"
        case .int8: "bigint"
        case .int2: "smallint"
        case .int4: "integer"
        case .text: "text"
        case .json: "json"
        case .float4: "real"
        case .float8: "double precision"
        case .varchar: "varchar"
        case .timestamp: "timestamp"
        case .timestamptz: "timestamptz"
        case .interval: "interval"
        case .numeric: "numeric"
        case .jsonb: "jsonb"
        case .name: "name"
        case .textArray: "text[]"
        case .int8Array: "bigint[]"
        case .int4Array: "integer[]"
        case .boolArray: "boolean[]"
        case .timestamptzArray: "timestamptz[]"
        default: "oid \(rawValue)"
        }
    }
}
