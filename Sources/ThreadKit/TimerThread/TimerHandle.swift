import Synchronization

/// A call scheduled on a ``TimerThread``, which can be cancelled until it runs.
///
/// For a one-shot call, exactly one of two things happens: it runs, or one ``cancel()`` returns
/// `true`. A repeating call runs until cancelled; the first ``cancel()`` returns `true`, and a call
/// cancelled during its run finishes that run and never runs again.
public final class TimerHandle: @unchecked Sendable, Hashable, TimerHeapElement {
    // Sendable: `state` is atomic and the other stored properties are constants, except `work`.
    // `work` belongs to whoever moves `state` on with a compare-and-exchange: the timer thread
    // when it takes the call to run (and, for a repeating call, when the run ends), the thread
    // whose cancel stops it. One exchange out of each state succeeds, so one thread at a time
    // reads or clears `work`, and the exchange orders its access after the previous owner's.
    //
    // A million pending calls must be cheap to hold, so a handle is kept within 56 bytes (one
    // 64-byte allocation): the rare tag lives in the timer's side table, the interval is stored
    // narrow, and the spacing of a repeating call is the interval's sign.

    /// The timer's core, not its public front: a handle keeps the timer's bookkeeping alive, so it
    /// stays safe to use after the ``TimerThread`` is gone, but never keeps the timer's thread.
    let core: TimerCore
    /// The repeat interval in nanoseconds, at least 1, negated for `.fixedDelay`; 0 for a one-shot call.
    private let signedIntervalNanoseconds: Int64
    var work: (@Sendable () -> Void)?
    /// A ``TimerCallState``'s raw value.
    private let state = Atomic<UInt8>(TimerCallState.scheduled.rawValue)
    /// Whether the timer's tag table holds a tag for this call.
    let isTagged: Bool

    init(core: TimerCore, repetition: Repetition?, isTagged: Bool, work: @escaping @Sendable () -> Void) {
        self.core = core
        if let repetition {
            let nanoseconds = max(1, repetition.interval.nanosecondsSaturated)
            signedIntervalNanoseconds = repetition.spacing == .fixedRate ? nanoseconds : -nanoseconds
        } else {
            signedIntervalNanoseconds = 0
        }
        self.isTagged = isTagged
        self.work = work
    }

    /// The call's state now.
    var callState: TimerCallState {
        TimerCallState(rawValue: state.load(ordering: .acquiring))
    }

    /// Moves the state on as `next` decides, atomically: `next` is asked again if another thread
    /// moved the state in between.
    ///
    /// Sequentially consistent, so that a cancel and the release of the timer (see
    /// ``TimerCore/cancel(_:)``) cannot both miss the other.
    ///
    /// - Returns: The state it left and the one it set, or `nil` if `next` refused (and the state
    ///   it saw).
    func advance(_ next: (TimerCallState) -> TimerCallState?) -> (from: TimerCallState, to: TimerCallState?) {
        var current = TimerCallState(rawValue: state.load(ordering: .sequentiallyConsistent))
        while true {
            guard let target = next(current) else { return (current, nil) }
            let (exchanged, seen) = state.compareExchange(
                expected: current.rawValue, desired: target.rawValue, ordering: .sequentiallyConsistent)
            if exchanged { return (current, target) }
            current = TimerCallState(rawValue: seen)
        }
    }

    /// How a repeating call repeats.
    struct Repetition: Equatable {
        /// The time between runs, as `spacing` counts it; more than zero.
        var interval: Duration
        var spacing: TimerThread.Spacing
    }

    /// How the call repeats, or `nil` for a one-shot call. The interval reads back in whole
    /// nanoseconds (at least one), saturated at `Int64.max`.
    var repetition: Repetition? {
        guard signedIntervalNanoseconds != 0 else { return nil }
        return Repetition(
            interval: .nanoseconds(signedIntervalNanoseconds.magnitude),
            spacing: signedIntervalNanoseconds > 0 ? .fixedRate : .fixedDelay)
    }

    /// Whether the call repeats.
    var isRepeating: Bool { signedIntervalNanoseconds != 0 }

    /// The repeat interval, or `nil` for a one-shot call.
    var interval: Duration? { repetition?.interval }

    /// Stops the call.
    ///
    /// - Returns: `true` if this stopped a call that would otherwise have run: a one-shot call that
    ///   has not started, or a repeating call's future runs. `false` if it already ran, is running
    ///   (one-shot), or was already cancelled.
    @discardableResult
    public func cancel() -> Bool {
        core.cancel(self)
    }

    /// Whether the call was cancelled before running, or, for a repeating call, before its next run:
    /// by this handle, by ``TimerThread/cancelAll(tag:)``, by ``TimerThread/dispose()``, or by the
    /// release of a private timer (which stops its repeating calls).
    public var isCancelled: Bool {
        callState.phase == .cancelled
    }

    /// Whether the call has started running at least once; for a repeating call, `true` from the
    /// moment its first run begins.
    public var hasFired: Bool {
        callState.hasRun
    }

    /// Whether both are the same handle: every call has its own.
    public static func == (lhs: TimerHandle, rhs: TimerHandle) -> Bool { lhs === rhs }

    /// Hashes the handle's identity, so handles can be kept in sets and as dictionary keys.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
