/// One value of the Redis serialization protocol, version 2 (RESP2): a reply from the server, or a
/// command to it.
///
/// A command is an array of bulk strings (``command(_:)``); a reply is any of these. A server's error
/// reply (`-ERR …`) at the top of a reply reaches ``RedisClient``'s callers as a thrown
/// ``RedisError/server(_:)``, never as a value; one nested in an array (in the answer to `EXEC`, or
/// in a script's table) stays an ``error(_:)`` element.
public enum RESPValue: Sendable, Hashable, CustomStringConvertible {
    /// A simple string (`+OK`): a line of text, with no CR or LF in it.
    case simpleString(String)
    /// An error (`-ERR unknown command`): its message, the kind of error first.
    case error(String)
    /// A signed 64-bit integer (`:42`).
    case integer(Int64)
    /// A bulk string (`$3 abc`): any bytes; `nil` for the null bulk string (`$-1`), the answer to a
    /// `GET` of a missing key.
    case bulkString([UInt8]?)
    /// An array (`*2 …`) of values, arrays among them; `nil` for the null array (`*-1`).
    case array([RESPValue]?)

    /// The command `arguments` as the server takes it: an array of bulk strings, each argument's
    /// UTF-8 bytes.
    public static func command(_ arguments: [String]) -> RESPValue {
        .array(arguments.map { .bulkString(Array($0.utf8)) })
    }

    /// The text of a simple string, or of a bulk string (its bytes decoded as UTF-8, an invalid
    /// sequence replaced by U+FFFD); `nil` for anything else, the null bulk string included.
    public var string: String? {
        switch self {
        case .simpleString(let text): text
        case .bulkString(let bytes?): String(decoding: bytes, as: UTF8.self)
        default: nil
        }
    }

    /// The integer of an ``integer(_:)``; `nil` for anything else.
    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    /// The elements of a non-null array; `nil` for anything else.
    public var array: [RESPValue]? {
        if case .array(let elements?) = self { return elements }
        return nil
    }

    /// Whether it is the null bulk string or the null array.
    public var isNull: Bool {
        self == .bulkString(nil) || self == .array(nil)
    }

    /// The value in the protocol's bytes, the form the client's parser reads back.
    ///
    /// A simple string or an error must not contain CR or LF (the protocol has no way to carry
    /// them): the server never sends one, and commands are bulk strings.
    public var encoded: [UInt8] {
        var bytes: [UInt8] = []
        append(to: &bytes)
        return bytes
    }

    private func append(to bytes: inout [UInt8]) {
        switch self {
        case .simpleString(let text):
            Self.appendLine(UInt8(ascii: "+"), text, to: &bytes)
        case .error(let message):
            Self.appendLine(UInt8(ascii: "-"), message, to: &bytes)
        case .integer(let value):
            Self.appendLine(UInt8(ascii: ":"), String(value), to: &bytes)
        case .bulkString(nil):
            Self.appendLine(UInt8(ascii: "$"), "-1", to: &bytes)
        case .bulkString(let content?):
            Self.appendLine(UInt8(ascii: "$"), String(content.count), to: &bytes)
            bytes += content
            bytes += [13, 10]
        case .array(nil):
            Self.appendLine(UInt8(ascii: "*"), "-1", to: &bytes)
        case .array(let elements?):
            Self.appendLine(UInt8(ascii: "*"), String(elements.count), to: &bytes)
            for element in elements { element.append(to: &bytes) }
        }
    }

    private static func appendLine(_ type: UInt8, _ text: String, to bytes: inout [UInt8]) {
        bytes.append(type)
        bytes += text.utf8
        bytes += [13, 10]
    }

    /// A short, readable form: `"OK"`, `(error) ERR …`, `(integer) 42`, `"abc"` (bulk strings as
    /// UTF-8 text, escaped), `(nil)`, `[…]`.
    public var description: String {
        switch self {
        case .simpleString(let text): "\"\(text)\""
        case .error(let message): "(error) \(message)"
        case .integer(let value): "(integer) \(value)"
        case .bulkString(nil), .array(nil): "(nil)"
        case .bulkString(let bytes?): String(reflecting: String(decoding: bytes, as: UTF8.self))
        case .array(let elements?): "[" + elements.map(\.description).joined(separator: ", ") + "]"
        }
    }
}
