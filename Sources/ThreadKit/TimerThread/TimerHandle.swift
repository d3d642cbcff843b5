/// A call scheduled on a ``TimerThread``, which can be cancelled until it runs.
///
/// For a one-shot call, exactly one of two things happens: it runs, or one ``cancel()`` returns
/// `true`. A repeating call runs until cancelled; the first ``cancel()`` returns `true`.
public final class TimerHandle: @unchecked Sendable, Hashable, TimerHeapElement {
    // Sendable: every `var` here is guarded by `timer.mutex`.

    enum Phase {
        /// Waiting in the timer's heap.
        case scheduled
        /// Running on the timer thread now.
        case running
        /// A one-shot call that has run.
        case fired
        /// Cancelled, or dropped by `dispose()`: it will not run (again).
        case cancelled
    }

    let timer: TimerThread
    /// The repeat interval, or `nil` for a one-shot call.
    let interval: Duration?
    let tag: AnyHashable?
    var work: (@Sendable () -> Void)?
    var phase = Phase.scheduled
    var hasRun = false
    var heapIndex: Int?

    init(timer: TimerThread, interval: Duration?, tag: AnyHashable?, work: @escaping @Sendable () -> Void) {
        self.timer = timer
        self.interval = interval
        self.tag = tag
        self.work = work
    }

    /// Stops the call.
    ///
    /// - Returns: `true` if this stopped a call that would otherwise have run: a one-shot call that
    ///   has not started, or a repeating call's future runs. `false` if it already ran, is running
    ///   (one-shot), or was already cancelled.
    @discardableResult
    public func cancel() -> Bool {
        timer.cancel(self)
    }

    /// Whether the call was cancelled (or dropped by ``TimerThread/dispose()``) before running, or,
    /// for a repeating call, before its next run.
    public var isCancelled: Bool {
        timer.mutex.withLock { phase == .cancelled }
    }

    /// Whether the call has started running at least once.
    public var hasFired: Bool {
        timer.mutex.withLock { hasRun }
    }

    public static func == (lhs: TimerHandle, rhs: TimerHandle) -> Bool { lhs === rhs }

    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
