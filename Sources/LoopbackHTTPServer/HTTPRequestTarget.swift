/// A request target split into its path and its query's parameters: a pure value.
///
/// It accepts the origin form (`/path?query`), the absolute form (`http://host:port/path?query`,
/// scheme `http` or `https` in any case; its path defaults to `/`) and the asterisk form (`*`).
/// Every `%` must start a percent-escape of two hexadecimal digits, in the path and the query alike.
/// The query is split at `&` (empty parts are skipped), each part at its first `=` (a part without
/// one is a parameter with an empty value); names and values are percent-decoded (`+` stays a
/// plus sign) and must then be UTF-8. A parameter with an empty name, such as `/?=`, is an error.
/// When a name repeats, the last value counts.
public struct HTTPRequestTarget: Sendable, Equatable {
    /// The path as sent, percent-escapes kept, such as `/stream` (`*` for the asterisk form).
    public let path: String
    /// The query as sent, without its `?`; `nil` if the target has no `?`.
    public let rawQuery: String?
    /// The query's parameters, decoded.
    public let query: [String: String]

    /// The path and the query as sent: `/path?query` (also for the absolute form).
    public var pathAndQuery: String { rawQuery.map { "\(path)?\($0)" } ?? path }

    /// Splits `target`, a request target as sent.
    ///
    /// - Throws: ``HTTPRequestError`` (400) if it is none of the accepted forms, has a malformed
    ///   percent-escape, a parameter with an empty name, or a name or value that is not UTF-8.
    public init(_ target: String) throws(HTTPRequestError) {
        var rest = Substring(target)
        if target == "*" {
            path = "*"
            rawQuery = nil
            query = [:]
            return
        }
        if !rest.hasPrefix("/") {
            let lowered = rest.prefix(8).lowercased()
            let schemeLength = lowered.hasPrefix("http://") ? 7 : lowered.hasPrefix("https://") ? 8 : nil
            guard let schemeLength else {
                throw .badRequest("the request target is neither a path starting with / nor an http(s) URL: \(target)")
            }
            rest = rest.dropFirst(schemeLength)
            guard let pathStart = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else {
                path = "/"
                rawQuery = nil
                query = [:]
                return
            }
            rest = rest[pathStart...]
        }
        let pathPart: Substring
        if let mark = rest.firstIndex(of: "?") {
            pathPart = rest[..<mark]
            rawQuery = String(rest[rest.index(after: mark)...])
        } else {
            pathPart = rest
            rawQuery = nil
        }
        _ = try Self.decode(pathPart, what: "the path")
        path = pathPart.isEmpty ? "/" : String(pathPart)
        var query: [String: String] = [:]
        for part in (rawQuery ?? "").split(separator: "&") {
            let name: Substring
            let value: Substring
            if let equals = part.firstIndex(of: "=") {
                name = part[..<equals]
                value = part[part.index(after: equals)...]
            } else {
                name = part
                value = ""
            }
            guard !name.isEmpty else { throw .badRequest("a query parameter has no name: \(part)") }
            query[try Self.decode(name, what: "a query parameter's name")] = try Self.decode(value, what: "a query parameter's value")
        }
        self.query = query
    }

    /// `text` with its percent-escapes decoded.
    static func decode(_ text: Substring, what: String) throws(HTTPRequestError) -> String {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return String(text) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(HTTPCharacters.hexValue),
                  let low = iterator.next().flatMap(HTTPCharacters.hexValue) else {
                throw .badRequest("\(what) has a % not followed by two hexadecimal digits: \(text)")
            }
            bytes.append(UInt8(high * 16 + low))
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw .badRequest("\(what) is not UTF-8 once decoded: \(text)")
        }
        return decoded
    }
}
