import ThreadKit

extension Log.Source {
    /// ThreadKitRedis's ``RedisClient``: connections made and lost, reconnect attempts and their
    /// back-off, command timeouts, scripts sent again after `NOSCRIPT`.
    public static let redis = Log.Source("Redis")
}
