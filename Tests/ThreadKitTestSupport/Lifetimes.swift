import Synchronization

/// Counts the live ``LifetimeTracked`` instances it made, to prove closures and values are released.
public final class LifetimeTracker: Sendable {
    private let live = Atomic<Int>(0)

    public init() {}

    /// A new tracked instance; it counts as live until it is deinitialised.
    public func make() -> LifetimeTracked {
        live.wrappingAdd(1, ordering: .relaxed)
        return LifetimeTracked(tracker: self)
    }

    fileprivate func released() {
        live.wrappingSubtract(1, ordering: .relaxed)
    }

    /// Instances made and not yet deinitialised.
    public var liveCount: Int { live.load(ordering: .relaxed) }
}

/// An object whose deinitialisation its ``LifetimeTracker`` counts.
public final class LifetimeTracked: Sendable {
    private let tracker: LifetimeTracker

    fileprivate init(tracker: LifetimeTracker) {
        self.tracker = tracker
    }

    deinit {
        tracker.released()
    }
}

/// A closure that captures a fresh ``LifetimeTracked`` of `tracker` and counts its runs; nothing
/// else holds the tracked object.
public func trackedWork(_ tracker: LifetimeTracker, _ ran: Counter) -> @Sendable () -> Void {
    let object = tracker.make()
    return { withExtendedLifetime(object) { _ = ran.increment() } }
}
