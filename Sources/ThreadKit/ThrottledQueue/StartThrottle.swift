/// The throttle's rules for starts that may overlap: a rate limit and a pause, nothing else.
///
/// `URLDispatcher` (module `ThreadKitURL`) caps the requests it starts per endpoint with the same
/// rules a ``ThrottledQueue`` applies to its tasks, so this is a thin face over the queue's own pure
/// schedule, not a second rate limiter: each start is a zero-length task with no gap, so only the
/// rate limit's sliding window and the pause remain. It reads no clock: every instant is given, as
/// an offset from an origin the caller picks, so tests drive it with made-up times.
///
/// It is SPI (`@_spi(ThreadKitURL)`), for ThreadKit's own modules; it is not part of the public API.
@_spi(ThreadKitURL)
public struct StartThrottle: Sendable {
    private var schedule: ThrottleSchedule<Void>
    /// Offsets are shifted by this much, so that instants before the origin stay on the time line.
    private static let base = MonotonicInstant(nanoseconds: UInt64(Int64.max) / 2)

    /// A throttle with no start yet and no pause.
    ///
    /// - Parameter limit: At most `limit.count` starts in any window of `limit.window`; `nil` for no cap.
    public init(limit: RateLimit?) {
        schedule = ThrottleSchedule(interval: .zero, monitor: .concurrent, mutability: .none, limit: limit)
    }

    /// The rate limit in force.
    public var limit: RateLimit? { schedule.limit }

    /// The earliest offset at which a start is allowed (perhaps already past).
    public func earliestStart() -> Duration {
        var copy = schedule
        copy.submit(())
        guard case .startAt(let instant) = copy.nextStart() else {
            preconditionFailure("StartThrottle: a start with nothing running must have a time")
        }
        return Self.base.duration(to: instant)
    }

    /// Records a start at offset `now`, which must not be before ``earliestStart()``.
    public mutating func recordStart(at now: Duration) {
        let instant = Self.base.advanced(by: now)
        schedule.submit(())
        schedule.start(at: instant)
        schedule.end(at: instant)
    }

    /// No start before offset `until`; a later pause already in force stays.
    public mutating func pause(until: Duration) {
        schedule.pause(until: Self.base.advanced(by: until))
    }

    /// Where the pause ends, if one was set (it may have passed).
    public var pausedUntil: Duration? {
        schedule.pausedUntil.map { Self.base.duration(to: $0) }
    }
}
