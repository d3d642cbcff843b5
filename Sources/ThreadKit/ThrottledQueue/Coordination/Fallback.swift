/// What a queue whose starts are shared by a fleet (see ``Coordination``) does while the shared
/// decider (Redis) does not answer, or answers that the key is used with other rules.
///
/// For a ``ThrottledQueue`` the decision is the queue's, start by start: each start asks the
/// decider, whose circuit breaker answers "unavailable" at once while it is open, and the queue
/// applies this policy to that one start. Once the decider answers again, the next start is
/// coordinated again, and the change is logged both ways through ``Log`` (the `.throttle` source).
///
/// For a `URLDispatcher` endpoint whose `maxRequests` is shared, an "unavailable" answer to a
/// lease ask applies this policy to every start of the endpoint until the time the answer gives
/// (the breaker's back-off, or the coordinator's poll interval), then a lease is asked for again;
/// ``localFallback(share:)`` lets at most `maxRequests` × `share` (at least 1) requests of the
/// endpoint run, ``failOpen`` its local `maxRequests`. The change is logged both ways under the
/// `.urlDispatcher` source. A request started under the fallback holds no lease; once the leases
/// answer again it is given one first, whatever the limit (it is *adopted*), and new requests wait
/// until the fleet is back under `maxRequests`.
public enum Fallback: Sendable, Equatable {
    /// The local throttle at `share` of the rate (the default, with a share of 0.5): the gap
    /// divided by `share`, a limit of n per w scaled to `share` × n per w. A command that timed
    /// out after it was sent counts as one of its starts. `share` is per process: with 8 replicas
    /// and a share of 0.5, the fleet runs at up to 4 times the shared rate meanwhile; pick
    /// 1 / replicas to stay within it. It must be in 0 < share ≤ 1.
    case localFallback(share: Double)
    /// Nothing starts until the decider answers again.
    case failClosed
    /// The queue's own rules only, at the full rate.
    case failOpen

    /// The default: ``localFallback(share:)`` with a share of 0.5.
    package static let standard = Fallback.localFallback(share: 0.5)

    /// Stops with a precondition failure naming `argument` if a share is not in 0 < share ≤ 1.
    package func validate(_ argument: String) {
        guard case .localFallback(let share) = self else { return }
        precondition(share > 0 && share <= 1, "\(argument): the fallback share must be in 0 < share ≤ 1, got \(share)")
    }

    /// The rules of the local fallback at `share` of the rate, in microseconds, each rounded so
    /// that the fallback is never faster than `share` of the coordinated rate:
    ///
    /// - the gap is `gap / share` (one start per gap becomes `share` starts per gap), rounded up;
    /// - a limit of `n` per `w` becomes `n′ = max(1, ⌊n × share⌋)` per `w′ = w × n′ / (n × share)`,
    ///   rounded up: the rate n′/w′ is exactly `share` × n/w, and a burst is at most `n × share`
    ///   starts (one, if that is less than one).
    package static func fallbackRules(
        gap: Int64, limit: (count: Int, window: Int64)?, share: Double
    ) -> (gap: Int64, limit: (count: Int, window: Int64)?) {
        let scaledGap = microseconds(Double(gap) / share)
        guard let limit else { return (scaledGap, nil) }
        let allowed = Double(limit.count) * share
        let count = max(1, Int(allowed.rounded(.down)))
        return (scaledGap, (count, microseconds(Double(limit.window) * Double(count) / allowed)))
    }

    /// `value` rounded up to whole microseconds, clamped to `Int64`.
    private static func microseconds(_ value: Double) -> Int64 {
        value >= 9.2e18 ? .max : Int64(value.rounded(.up))
    }
}

/// The package's name for ``Fallback``: what a coordinated queue does while its coordinator cannot decide.
package typealias UnavailablePolicy = Fallback
