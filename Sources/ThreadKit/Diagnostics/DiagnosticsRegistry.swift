/// The live components, held weakly: each registers when it is created and leaves in its deinit.
///
/// A snapshot holds one component at a time, for as long as it reads it, and never under the
/// registry's lock. A component whose last other reference goes while it is read is
/// deinitialized when that read ends, on the reading thread (as an object a closure on another
/// thread captured is); a read takes microseconds, so in practice a release deinitializes at once.
///
/// `package`: ThreadKitURL's dispatcher and ThreadKitRedis's client register here too.
package enum DiagnosticsRegistry {
    /// Adds `component`, which reports itself in every snapshot until it calls ``remove(_:)``.
    package static func add(_ component: any DiagnosticsReporting) {
        entries.withLock { entries in
            entries.next += 1
            entries.live[ObjectIdentifier(component)] = Entry(order: entries.next, component: component)
        }
    }

    /// Removes the component whose identity is `id` (call it from its deinit).
    package static func remove(_ id: ObjectIdentifier) {
        // The entry holds its component weakly: dropping it releases nothing under the lock.
        entries.withLock { _ = $0.live.removeValue(forKey: id) }
    }

    /// The live component whose identity is `id`, if it is still registered: a strong reference,
    /// which the caller releases soon, after the registry's lock.
    package static func component(_ id: ObjectIdentifier) -> (any DiagnosticsReporting)? {
        let entry = entries.withLock { $0.live[id] }
        return entry?.component
    }

    /// Every live component's report, oldest first: each component is held only while it reports.
    static func reports(_ clock: DiagnosticsClock) -> [Snapshot.Component] {
        let entries = entries.withLock { Array($0.live.values) }.sorted { $0.order < $1.order }
        return entries.compactMap { entry in entry.component?.report(clock) }
    }

    private struct Entry: @unchecked Sendable {
        // Sendable: a weak reference is loaded atomically, and the component is `Sendable`.
        let order: Int
        weak var component: (any DiagnosticsReporting)?
    }

    private struct Entries: Sendable {
        var next = 0
        var live: [ObjectIdentifier: Entry] = [:]
    }

    private static let entries = Locked(Entries())
}

/// A component that reports itself in ``Diagnostics/snapshot(longWaitsOver:)``.
///
/// `report(_:)` takes the component's lock once, briefly, copies what it needs, and builds the
/// entry after letting go; it never calls user code (a timer's tag is shown only when it is a
/// string or a number, else by its type's name).
package protocol DiagnosticsReporting: AnyObject, Sendable {
    /// The component's entry in a snapshot taken at `clock`'s instant.
    func report(_ clock: DiagnosticsClock) -> Snapshot.Component
}

/// The instant a snapshot is taken, and the conversions every report makes with it.
package struct DiagnosticsClock: Sendable {
    let now: MonotonicInstant
    /// The threads' states as a snapshot read them, once each before the components report, so
    /// that a thread's row and its edge in the wait-for graph tell the same moment.
    private let states: [ObjectIdentifier: ThreadActivity.State]

    init(now: MonotonicInstant, states: [ObjectIdentifier: ThreadActivity.State] = [:]) {
        self.now = now
        self.states = states
    }

    /// Seconds from `instant` to now (positive for an instant in the past), exact however far
    /// `instant` is (a deadline of "never" included).
    func seconds(since instant: MonotonicInstant) -> Double {
        now >= instant
            ? Double(now.nanoseconds - instant.nanoseconds) / 1e9
            : -Double(instant.nanoseconds - now.nanoseconds) / 1e9
    }

    /// `activity`'s state as the snapshot read it, or (for a thread started since) as it is now.
    func state(of activity: ThreadActivity) -> ThreadActivity.State {
        states[ObjectIdentifier(activity)] ?? activity.read()
    }

    /// Seconds from now to `instant` (negative for an instant in the past).
    func seconds(until instant: MonotonicInstant) -> Double {
        -seconds(since: instant)
    }

    /// Seconds from now to `instant` on `ContinuousClock` (negative for the past).
    package func seconds(until instant: ContinuousClock.Instant) -> Double {
        seconds(until: MonotonicInstant(instant))
    }

    /// The entry of a thread, from its state as the snapshot read it.
    package func thread(_ activity: ThreadActivity) -> Snapshot.Thread {
        let state = state(of: activity)
        return Snapshot.Thread(
            name: activity.name, kernelName: activity.kernelName, kernelThreadID: activity.kernelThreadID,
            state: state.phase, seconds: max(0, seconds(since: state.since)),
            until: state.until.map { seconds(until: $0) }, work: state.work,
            waitsFor: state.wait.map { $0.target.description })
    }

    /// `duration` in seconds, as snapshots and metrics give every duration.
    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// A duration as a configuration value: `10s`, `250ms`, `40µs`.
    package static func text(_ duration: Duration) -> String {
        let seconds = seconds(duration)
        if seconds == 0 { return "0s" }
        if seconds.magnitude >= 1 { return "\(trimmed(seconds))s" }
        if seconds.magnitude >= 1e-3 { return "\(trimmed(seconds * 1e3))ms" }
        return "\(trimmed(seconds * 1e6))µs"
    }

    private static func trimmed(_ value: Double) -> String {
        let rounded = (value * 1000).rounded() / 1000
        // Past 1e15 a Double holds no fraction, and past Int.max `Int(_:)` traps (a timeout of "never").
        guard rounded.magnitude < 1e15 else { return String(format: "%.0f", rounded) }
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }
}

extension ThreadActivity.WaitTarget: CustomStringConvertible {
    /// What is waited for, as messages name it.
    var description: String {
        switch self {
        case .context(let context): context.description
        case .object(let object): object.waitDescription
        }
    }

    /// The thread that runs or holds what is waited for, if one does.
    var holdingThread: ThreadActivity? {
        switch self {
        case .context(let context): context.holdingThread
        case .object(let object): object.holdingThread
        }
    }
}

extension SerialContext {
    /// The thread that runs this context's work now: a dedicated thread's own thread, a throttled
    /// queue's or a one-thread pool's worker while it runs a task; `nil` for a `DispatchQueue`
    /// and the main queue, whose threads libdispatch keeps to itself.
    var holdingThread: ThreadActivity? {
        switch kind {
        case .main, .queue: nil
        case .thread(let core): core.holdingThread
        case .throttled(let queue): queue.holdingThread
        case .nestedTurn(let hold): hold.queue.holdingThread
        case .pool(let pool): pool.holdingThread
        }
    }
}
