#if canImport(Glibc)
import Glibc  // memcmp
#elseif canImport(Darwin)
import Darwin
#endif

/// A validating single-pass JSON reader over bytes, for Apple's answers and notifications.
///
/// Decoding a verifyReceipt answer was most of the client's CPU with `JSONDecoder` (a tree of
/// boxed values, three keyed lookups per tolerant field, thrown and caught errors). This reader
/// walks the bytes once: the caller visits an object's members by key and keeps only the scalar
/// values it needs as byte ranges (`AppleJSONValue`), read later with Apple's tolerance; the
/// members it does not know are skipped, but still checked, so malformed JSON anywhere is an
/// error, as it was.
///
/// The reader, its keys and its values point into the bytes being read, so all three are
/// `~Escapable`, bound to the lifetime of the read (`DocumentLifetime`): the compiler refuses a
/// value kept past `read`, stored in a property or returned from it.
struct AppleJSONReader: ~Escapable {
    private let bytes: UnsafeBufferPointer<UInt8>
    /// The read's scope: every key and value handed out inherits it.
    private let lifetime: DocumentLifetime
    private var position: Int
    private var depth = 0
    /// Set on entering an object: its first member comes without a comma.
    private var expectsFirstItem = false
    /// The name of the member whose value comes next (as written), so that a value read from it
    /// can name its field in an error at no cost when there is none.
    private var memberName = UnsafeBufferPointer<UInt8>(start: nil, count: 0)

    /// Objects and arrays nest at most this deep: a hostile answer cannot exhaust the stack.
    static let maximumDepth = 64

    /// Reads `body` as one JSON document: `read` consumes the top-level value, and only white
    /// space may follow it. A UTF-8 byte order mark in front is skipped.
    static func read<Result>(_ body: some Collection<UInt8>, _ read: (inout AppleJSONReader) throws -> Result) throws -> Result {
        func run(_ buffer: UnsafeBufferPointer<UInt8>) throws -> Result {
            let document = Span(_unsafeElements: buffer)
            var reader = AppleJSONReader(bytes: buffer, lifetime: DocumentLifetime(document))
            if buffer.count >= 3, buffer[0] == 0xEF, buffer[1] == 0xBB, buffer[2] == 0xBF { reader.position = 3 }
            let result = try read(&reader)
            reader.skipWhitespace()
            guard reader.position == buffer.count else { throw reader.syntaxError("text after the JSON value") }
            return result
        }
        if let result = try body.withContiguousStorageIfAvailable(run) { return result }
        return try Array(body).withUnsafeBufferPointer(run)
    }

    @_lifetime(copy lifetime)
    private init(bytes: UnsafeBufferPointer<UInt8>, lifetime: DocumentLifetime) {
        self.bytes = bytes
        self.lifetime = lifetime
        position = 0
    }

    // MARK: Containers

    /// Visits each member of the object that comes next; `member` must consume the value (read,
    /// keep or skip it). Throws if the next value is not an object.
    mutating func readObject(_ member: (borrowing AppleJSONKey, inout AppleJSONReader) throws -> Void) throws {
        try enterObject()
        while let key = try nextMember() {
            try member(key, &self)
        }
    }

    /// Enters the object that must come next; `nextMember` then gives its member names. For a
    /// caller that keeps values until the object ends (a closure could not keep them: they
    /// live no longer than the read).
    mutating func enterObject() throws {
        try enter(UInt8(ascii: "{"), "an object")
        expectsFirstItem = true
    }

    /// The next member's name, with the reader at its value (which the caller must consume), or
    /// nil once the object has ended.
    @_lifetime(copy self)
    mutating func nextMember() throws -> AppleJSONKey? {
        // Empty, or a comma before the end: tolerated, as Foundation's parser tolerates it.
        if expectsFirstItem {
            expectsFirstItem = false
            if leaves(UInt8(ascii: "}")) { return nil }
        } else if try endsAfterItem(UInt8(ascii: "}")) || leaves(UInt8(ascii: "}")) {
            return nil
        }
        let key = try readKey()
        memberName = key.bytes
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw syntaxError("expected ':'") }
        position += 1
        return key
    }

    /// Visits each element of the array that comes next; `element` must consume it.
    mutating func readArray(_ element: (inout AppleJSONReader) throws -> Void) throws {
        try enter(UInt8(ascii: "["), "an array")
        while !leaves(UInt8(ascii: "]")) {
            try element(&self)
            if try endsAfterItem(UInt8(ascii: "]")) { return }
        }
    }

    /// What comes next, without consuming it.
    mutating func peek() throws -> AppleJSONValue.Kind {
        skipWhitespace()
        guard position < bytes.count else { throw syntaxError("unexpected end") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        default: return .number
        }
    }

    /// The next value, checked and kept as a byte range: a scalar to read later with Apple's
    /// tolerance, or a container to report as the wrong type.
    @_lifetime(copy self)
    mutating func value() throws -> AppleJSONValue {
        let member = memberName  // before a container's own members move it
        let kind = try peek()
        let start = position
        var escaped = false
        switch kind {
        case .object, .array: try skipContainer()
        case .string: escaped = try skipString()
        case .number: try skipNumber()
        case .bool, .null: try skipLiteral()
        }
        return AppleJSONValue(
            kind: kind, bytes: UnsafeBufferPointer(rebasing: bytes[start..<position]), escaped: escaped, member: member,
            lifetime: lifetime)
    }

    /// Checks and passes over the next value.
    mutating func skipValue() throws {
        _ = try value()
    }

    // MARK: Scanning

    /// Consumes the opening bracket of the container that must come next.
    private mutating func enter(_ open: UInt8, _ expected: String) throws {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == open else { throw typeError(expected) }
        depth += 1
        guard depth <= Self.maximumDepth else { throw syntaxError("nested deeper than \(Self.maximumDepth) levels") }
        position += 1
    }

    /// Consumes `close` if it comes next, leaving the container.
    private mutating func leaves(_ close: UInt8) -> Bool {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == close else { return false }
        position += 1
        depth -= 1
        return true
    }

    /// After a member or element: true when the container ended, false after a comma.
    private mutating func endsAfterItem(_ close: UInt8) throws -> Bool {
        skipWhitespace()
        guard position < bytes.count else { throw syntaxError("unterminated \(close == UInt8(ascii: "}") ? "object" : "array")") }
        if bytes[position] == UInt8(ascii: ",") {
            position += 1
            return false
        }
        if leaves(close) { return true }
        throw syntaxError("expected ',' or '\(Character(Unicode.Scalar(close)))'")
    }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x0A, 0x0D, 0x09: position += 1
            default: return
            }
        }
    }

    private mutating func skipContainer() throws {
        if bytes[position] == UInt8(ascii: "{") {
            try readObject { _, reader in try reader.skipValue() }
        } else {
            try readArray { reader in try reader.skipValue() }
        }
    }

    @_lifetime(copy self)
    private mutating func readKey() throws -> AppleJSONKey {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw syntaxError("expected a member name") }
        let start = position
        let escaped = try skipString()
        let raw = UnsafeBufferPointer(rebasing: bytes[(start + 1)..<(position - 1)])
        return AppleJSONKey(bytes: raw, unescaped: escaped ? try AppleJSONValue.unescape(raw) : nil, lifetime: lifetime)
    }

    /// Passes over a string, checking its escapes and UTF-8; says whether it holds escapes.
    private mutating func skipString() throws -> Bool {
        position += 1  // the opening quote
        var escaped = false
        var asciiOnly = true
        let start = position
        while position < bytes.count {
            skipPlainASCII()
            guard position < bytes.count else { break }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                if !asciiOnly, String(validating: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self) == nil {
                    throw syntaxError("a string that is not UTF-8")
                }
                position += 1
                return escaped
            }
            if byte == UInt8(ascii: "\\") {
                escaped = true
                position += 1
                guard position < bytes.count else { break }
                switch bytes[position] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                     UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    position += 1
                case UInt8(ascii: "u"):
                    guard position + 4 < bytes.count,
                          (1...4).allSatisfy({ AppleJSONValue.hexValue(bytes[position + $0]) != nil })
                    else { throw syntaxError("a bad \\u escape") }
                    position += 5
                default:
                    throw syntaxError("a bad escape")
                }
                continue
            }
            guard byte >= 0x20 else { throw syntaxError("a control character inside a string") }
            if byte >= 0x80 { asciiOnly = false }
            position += 1
        }
        throw syntaxError("unterminated string")
    }

    /// Moves past eight bytes at a time while none of them needs a look: no quote, no
    /// backslash, no control character, nothing past ASCII. Most of an answer's bytes are the
    /// base64 receipt Apple sends back, which the byte-by-byte loop spent 4 % of a run on.
    private mutating func skipPlainASCII() {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        /// Whether any byte of `word` is zero (exact as a yes or no).
        func anyZero(_ word: UInt64) -> Bool { (word &- ones) & ~word & highs != 0 }
        guard let base = bytes.baseAddress else { return }
        while position + 8 <= bytes.count {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + position).loadUnaligned(as: UInt64.self))
            let special = word & highs != 0  // past ASCII
                || (word &- ones &* 0x20) & ~word & highs != 0  // below 0x20
                || anyZero(word ^ (ones &* UInt64(UInt8(ascii: "\"")))) || anyZero(word ^ (ones &* UInt64(UInt8(ascii: "\\"))))
            if special { return }
            position += 8
        }
    }

    private mutating func skipNumber() throws {
        let start = position
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count, isDigit(bytes[position]) else { throw syntaxError("an invalid value") }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard position < bytes.count, isDigit(bytes[position]) else { throw syntaxError("an invalid number") }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard position < bytes.count, isDigit(bytes[position]) else { throw syntaxError("an invalid number") }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        // Like Foundation, refuse what a Double cannot hold (1e999); plain ids and `_ms` are short.
        if position - start > 18 || bytes[start..<position].contains(where: { !isDigit($0) && $0 != UInt8(ascii: "-") }) {
            guard let number = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)),
                  number.isFinite
            else { throw syntaxError("a number too large for a Double") }
        }
    }

    private mutating func skipLiteral() throws {
        for literal in ["true", "false", "null"] as [StaticString] where bytes[position] == literal.utf8Start[0] {
            let length = literal.utf8CodeUnitCount
            guard position + length <= bytes.count,
                  (0..<length).allSatisfy({ bytes[position + $0] == literal.utf8Start[$0] })
            else { break }
            position += length
            return
        }
        throw syntaxError("an invalid value")
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

    /// Names the member being read, where there is one: a hostile value (a number past any
    /// Double) is refused as the field's error.
    private func syntaxError(_ what: String) -> AppleJSONError {
        let field = memberName.isEmpty ? "" : " (in \(String(decoding: memberName.prefix(64), as: UTF8.self).debugDescription))"
        return AppleJSONError(description: "not valid JSON: \(what) at byte \(position)\(field)")
    }

    private func typeError(_ expected: String) -> AppleJSONError {
        AppleJSONError(description: "expected \(expected) at byte \(position)")
    }
}

/// A member name, compared without building a `String` unless it holds escapes. Lives no
/// longer than the read it came from.
struct AppleJSONKey: ~Escapable {
    let bytes: UnsafeBufferPointer<UInt8>
    let unescaped: String?
    private let lifetime: DocumentLifetime

    @_lifetime(copy lifetime)
    init(bytes: UnsafeBufferPointer<UInt8>, unescaped: String?, lifetime: DocumentLifetime) {
        self.bytes = bytes
        self.unescaped = unescaped
        self.lifetime = lifetime
    }

    /// The name's length in UTF-8 bytes, once escapes are decoded.
    var count: Int { unescaped?.utf8.count ?? bytes.count }

    /// The name as text (signed payloads keep their members by name).
    var string: String { unescaped ?? String(decoding: bytes, as: UTF8.self) }

    static func == (key: borrowing AppleJSONKey, name: StaticString) -> Bool {
        if let unescaped = key.unescaped { return unescaped == name.description }
        guard key.bytes.count == name.utf8CodeUnitCount else { return false }
        if key.bytes.isEmpty { return true }
        return memcmp(key.bytes.baseAddress!, name.utf8Start, key.bytes.count) == 0
    }
}

/// The scope of one `AppleJSONReader.read`, carried (at no size) by everything that points into
/// the document so that none of it can outlive the read.
struct DocumentLifetime: ~Escapable {
    @_lifetime(copy document)
    init(_ document: Span<UInt8>) {}
}

/// A malformed document, or a value of a type no spelling of Apple's explains.
public struct AppleJSONError: Error, CustomStringConvertible {
    public var description: String
    /// The field whose value is out of range (a date no Apple can send, a count past `Int32`), when
    /// that is the error: the answer is well-formed and wrong, so asking again will not mend it.
    public var outOfRangeField: String?

    public init(description: String, outOfRangeField: String? = nil) {
        self.description = description
        self.outOfRangeField = outOfRangeField
    }

    /// `field`'s value is out of range: `why` says how.
    static func outOfRange(_ field: String, _ why: String) -> AppleJSONError {
        AppleJSONError(description: "\(field): \(why)", outOfRangeField: field)
    }
}
