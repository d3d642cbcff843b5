/// The Redis keys of one shared limit, all under one hash tag: `threadkit:{<key>}:<part>`.
///
/// A Lua script may touch only keys that live on one node of a Redis Cluster. The cluster places a key
/// by the part between its first `{` and the next `}` (its hash tag), so every key made here, whatever
/// its part, lands on the node of `{<key>}`. With one server, the tag changes nothing.
///
/// The limit's key must be a non-empty string with no `{` or `}`: a brace would end the tag early
/// or start another one, and an empty tag (`{}`) does not count as a tag at all, so the keys of one
/// limit could land on different nodes. Such a key stops with a precondition failure that names it.
public struct RedisLimitKeys: Sendable, Hashable, CustomStringConvertible {
    /// The limit's key, as given (`api.example.com`).
    public let key: String

    /// The keys of the limit called `key`.
    ///
    /// - Parameter key: The limit's name, shared by every process that enforces it; not empty,
    ///   without `{` or `}`.
    public init(_ key: String) {
        precondition(!key.isEmpty, "RedisLimitKeys: key must not be empty, got \"\"")
        precondition(
            !key.contains("{") && !key.contains("}"),
            "RedisLimitKeys: key must not contain '{' or '}' (it would break the hash tag), got \"\(key)\"")
        self.key = key
    }

    /// The hash tag every key of the limit carries: `{<key>}`.
    public var hashTag: String { "{\(key)}" }

    /// The key of one part of the limit: `threadkit:{<key>}:<part>`.
    ///
    /// - Parameter part: What the key holds (`"starts"`, `"pause"`); it may contain anything, braces
    ///   too, since only the first `{…}` of a key is its tag.
    public func key(_ part: String) -> String {
        "threadkit:\(hashTag):\(part)"
    }

    /// The hash tag.
    public var description: String { hashTag }
}
