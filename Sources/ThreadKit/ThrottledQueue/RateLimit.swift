/// A cap on how many tasks a ``ThrottledQueue`` starts in any sliding window of time.
///
/// `RateLimit.rate(3, per: .seconds(1))` lets at most 3 tasks start in any one-second window: a
/// fourth start waits until one second after the start three before it.
///
/// **Arguments.** A `count` below 1 or a `window` of zero or less cannot work: it stops with a
/// precondition failure naming the argument and the value (`RateLimit.rate: count must be at least
/// 1, got 0`). `Int.max` starts is no cap in practice; a window however far out (`.seconds(Int64.max)`
/// and beyond) lets the first `count` tasks start and holds the rest until they are cancelled.
public struct RateLimit: Sendable, Equatable, CustomStringConvertible {
    /// The most starts in any window.
    public let count: Int
    /// The window's length.
    public let window: Duration

    /// At most `count` starts in any sliding window of length `window`.
    ///
    /// - Parameters:
    ///   - count: At least 1.
    ///   - window: More than zero.
    public static func rate(_ count: Int, per window: Duration) -> RateLimit {
        precondition(count >= 1, "RateLimit.rate(_:per:): count must be at least 1, got \(count)")
        precondition(window > .zero, "RateLimit.rate(_:per:): window must be more than zero, got \(window)")
        return RateLimit(count: count, window: window)
    }

    /// The limit as a phrase, e.g. "3 per 1.0 seconds".
    public var description: String { "\(count) per \(window)" }
}
