/// A Lua script for Redis, with the SHA-1 the server's script cache knows it by.
///
/// ``RedisClient/evaluate(_:keys:arguments:)`` runs it with `EVALSHA`, which sends only the
/// 40-character name; when the server answers `NOSCRIPT` (its cache is empty after a restart, a
/// failover or `SCRIPT FLUSH`), it sends the source once with `EVAL`, which also caches it again.
/// The SHA-1 is computed here, once, when the value is made, and is the one `SCRIPT LOAD` answers.
public struct RedisScript: Sendable, Hashable, CustomStringConvertible {
    /// The Lua source.
    public let source: String
    /// The lower-case hex SHA-1 of the source's UTF-8 bytes: the script's name in the server's cache.
    public let sha1: String

    /// A script with `source`.
    ///
    /// - Parameter source: The Lua source; it reads its keys from `KEYS` and its arguments from `ARGV`.
    public init(_ source: String) {
        self.source = source
        self.sha1 = SHA1.hex(Array(source.utf8))
    }

    /// `"script <sha1>"`.
    public var description: String { "script \(sha1)" }
}
