/// A thread that runs delayed and repeating calls, each cancellable through its ``TimerHandle``.
///
/// Calls run on the timer thread one at a time, in deadline order (equal deadlines in the order
/// they were scheduled), never before their deadline. Keep them short: a long call delays the
/// ones after it. The thread sleeps on a condition until the earliest deadline (it never polls)
/// and starts with the first scheduled call. Repeating calls run at a fixed rate or with a fixed
/// delay between runs; see ``schedule(every:startingAfter:spacing:tag:_:)``.
///
/// ```swift
/// let handle = try TimerThread.shared.schedule(after: .seconds(5)) { print("timed out") }
/// if handle.cancel() { print("stopped in time") }
/// ```
///
/// **Arguments.** A negative `delay` or `firstDelay`, and an `interval` of zero or less, cannot work:
/// each stops with a precondition failure naming the timer, the argument and the value
/// (`TimerThread 'Polls': interval must be more than zero, got 0.0 seconds`). A zero delay runs the
/// call as soon as the timer thread gets to it; an instant in the past, however far, is due at once;
/// a duration or instant however far out (`.seconds(Int64.max)` and beyond) means "never": the call
/// stays pending until cancelled.
public final class TimerThread: Sendable {
    /// The process-wide timer thread, started on first use and never disposed.
    public static let shared = TimerThread(name: "ThreadKit Timer", isShared: true)

    /// The timer's name: its thread's name, and the name in its log lines and errors.
    public let name: String

    /// The calls, the lock and the thread; what the thread and the handles hold, rather than this front.
    let core: TimerCore
    private let isShared: Bool

    /// Creates a private timer; its thread starts with the first call.
    ///
    /// The thread runs until ``dispose()``, or until this timer is released: then its pending
    /// one-shot calls still run when due (each can still be cancelled through its handle), its
    /// repeating calls stop, and the thread exits after the last call. A call that captures its own
    /// timer keeps it alive until that call is done with.
    ///
    /// - Parameter name: Names the thread, log lines and errors.
    public convenience init(name: String) {
        self.init(name: name, isShared: false)
    }

    private init(name: String, isShared: Bool) {
        self.name = name
        self.isShared = isShared
        self.core = TimerCore(name: name, isShared: isShared)
        // The core, which holds the state, reports; it leaves the inventory with this front.
        DiagnosticsRegistry.add(core)
    }

    deinit {
        DiagnosticsRegistry.remove(ObjectIdentifier(core))
        core.release()
    }

    // MARK: - Scheduling

    /// Runs `work` once, `delay` after this call.
    ///
    /// `work` is `@Sendable` in every `schedule`: it runs on the timer thread, not the caller's,
    /// and its handle, which any thread may hold, releases it on the thread that cancels it (a
    /// repeating call's, after runs on the timer thread, again and again).
    ///
    /// Any delay is accepted, however long: one beyond the monotonic clock's range (about 292
    /// years, `.seconds(Int64.max)` and more) means "never"; the call stays pending until cancelled.
    ///
    /// - Parameters:
    ///   - delay: Counted from this call; not negative.
    ///   - tag: Groups calls for ``cancelAll(tag:)``.
    ///   - work: Runs on the timer thread.
    /// - Returns: The call's handle.
    /// - Throws: ``TimerThreadError/disposed(name:)`` after ``dispose()``;
    ///   ``TimerThreadError/threadStartFailed(name:errno:)`` if the timer's thread was not running
    ///   and the system refused to start it.
    @discardableResult
    public func schedule(
        after delay: Duration, tag: (any Hashable & Sendable)? = nil,
        _ work: @escaping @Sendable () -> Void
    ) throws -> TimerHandle {
        precondition(delay >= .zero, "TimerThread '\(name)'.schedule(after:tag:_:): delay must not be negative, got \(delay)")
        return try add(work, repetition: nil, tag: tag, deadline: MonotonicInstant.now().advanced(by: delay))
    }

    /// Runs `work` once at `deadline`, or at once if it has passed.
    ///
    /// Any instant is accepted, however far out: one beyond the monotonic clock's range means
    /// "never", and one however far in the past is simply due.
    ///
    /// - Parameters:
    ///   - deadline: When to run.
    ///   - tag: Groups calls for ``cancelAll(tag:)``.
    ///   - work: Runs on the timer thread.
    /// - Returns: The call's handle.
    /// - Throws: ``TimerThreadError/disposed(name:)`` after ``dispose()``;
    ///   ``TimerThreadError/threadStartFailed(name:errno:)`` if the timer's thread was not running
    ///   and the system refused to start it.
    @discardableResult
    public func schedule(
        at deadline: ContinuousClock.Instant, tag: (any Hashable & Sendable)? = nil,
        _ work: @escaping @Sendable () -> Void
    ) throws -> TimerHandle {
        try add(work, repetition: nil, tag: tag, deadline: MonotonicInstant(deadline))
    }

    /// Runs `work` again and again until cancelled: first `firstDelay` after this call, then every
    /// `interval` as `spacing` counts it.
    ///
    /// - `.fixedRate` (the default; GCD's repeating timer, Java's `scheduleAtFixedRate`): runs are
    ///   due on the grid first + k × `interval`. A late run does not shift the ones after it, and
    ///   beats missed entirely (the call, or another call on this timer, ran long) are skipped, not
    ///   run back to back.
    /// - `.fixedDelay` (NIO's `scheduleRepeatedTask`, Java's `scheduleWithFixedDelay`): each run
    ///   is due `interval` after the previous one returned, so runs never come closer than
    ///   `interval`, however long they take.
    ///
    /// The handle's ``TimerHandle/cancel()`` returns `true` the first time; a call cancelled during
    /// its run finishes that run and never runs again. ``TimerHandle/hasFired`` turns `true` when
    /// the first run begins. ``pendingCount`` counts the call once, during its runs too.
    ///
    /// ```swift
    /// let poll = try TimerThread.shared.schedule(every: .seconds(5), startingAfter: .zero, spacing: .fixedDelay) {
    ///     fetchUpdates()   // however long it takes, the next fetch starts 5 s after it returned
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - interval: The period (`.fixedRate`) or the pause between runs (`.fixedDelay`); more than zero.
    ///   - firstDelay: From this call to the first run; not negative. `nil` (the default) waits one
    ///     `interval`; `.zero` runs it at once.
    ///   - spacing: How the runs after the first are spaced.
    ///   - tag: Groups calls for ``cancelAll(tag:)``.
    ///   - work: Runs on the timer thread.
    /// - Returns: The handle that stops the repetition.
    /// - Throws: ``TimerThreadError/disposed(name:)`` after ``dispose()``;
    ///   ``TimerThreadError/threadStartFailed(name:errno:)`` if the timer's thread was not running
    ///   and the system refused to start it.
    @discardableResult
    public func schedule(
        every interval: Duration, startingAfter firstDelay: Duration? = nil, spacing: Spacing = .fixedRate,
        tag: (any Hashable & Sendable)? = nil, _ work: @escaping @Sendable () -> Void
    ) throws -> TimerHandle {
        precondition(interval > .zero, "TimerThread '\(name)'.schedule(every:startingAfter:spacing:tag:_:): interval must be more than zero, got \(interval)")
        let firstDelay = firstDelay ?? interval
        precondition(firstDelay >= .zero, "TimerThread '\(name)'.schedule(every:startingAfter:spacing:tag:_:): firstDelay must not be negative, got \(firstDelay)")
        return try add(
            work, repetition: TimerHandle.Repetition(interval: interval, spacing: spacing), tag: tag,
            deadline: MonotonicInstant.now().advanced(by: firstDelay))
    }

    /// Cancels every pending or repeating call scheduled with `tag`.
    ///
    /// - Returns: How many calls this stopped: one-shot calls that had not started, and repeating
    ///   calls not cancelled before, running ones included (they finish their run).
    @discardableResult
    public func cancelAll(tag: some Hashable & Sendable) -> Int {
        core.cancelAll(tag: AnyHashable(tag))
    }

    /// Stops the timer: pending calls are dropped and its thread exits after any call now running.
    ///
    /// Every dropped call's handle reports ``TimerHandle/isCancelled``. A repeating call running at
    /// this moment finishes its run and does not run again; its handle reports `isCancelled` too, and
    /// it is counted among the calls that will never run. Later `schedule` calls throw. ``shared``
    /// cannot be disposed.
    ///
    /// - Returns: How many calls will never run (again).
    @discardableResult
    public func dispose() -> Int {
        precondition(!isShared, "TimerThread.shared is never disposed; make a TimerThread(name:) of your own to dispose")
        return core.dispose() ?? 0
    }

    /// How many calls will still run: one-shot calls waiting for their deadline, and repeating calls
    /// not cancelled, each counted once, whether it waits or runs now.
    public var pendingCount: Int {
        core.pendingCount
    }

    private func add(
        _ work: @escaping @Sendable () -> Void, repetition: TimerHandle.Repetition?,
        tag: (any Hashable & Sendable)?, deadline: MonotonicInstant
    ) throws(TimerThreadError) -> TimerHandle {
        try core.add(work, repetition: repetition, tag: tag, deadline: deadline)
    }
}

extension TimerThread {
    /// How the runs of a repeating call are spaced; see ``TimerThread/schedule(every:startingAfter:spacing:tag:_:)``.
    public enum Spacing: Sendable, Hashable, CustomStringConvertible {
        /// Runs on a fixed grid, first + k × interval; missed beats are skipped. GCD's repeating
        /// timer, Java's `scheduleAtFixedRate`.
        case fixedRate
        /// Each run due one interval after the previous run returned. NIO's `scheduleRepeatedTask`,
        /// Java's `scheduleWithFixedDelay`.
        case fixedDelay

        /// "fixed rate" or "fixed delay".
        public var description: String {
            switch self {
            case .fixedRate: "fixed rate"
            case .fixedDelay: "fixed delay"
            }
        }
    }
}

/// Why a ``TimerThread`` refused a call.
public enum TimerThreadError: Error, Equatable, CustomStringConvertible {
    /// The timer was disposed; it accepts no more calls.
    case disposed(name: String)
    /// The timer's thread was not running and the system refused to start it: `errno` is
    /// `pthread_create`'s error. The next call tries again.
    case threadStartFailed(name: String, errno: Int32)

    /// What went wrong, naming the timer.
    public var description: String {
        switch self {
        case .disposed(let name): disposedDescription(of: "TimerThread", named: name, accepting: "calls")
        case .threadStartFailed(let name, let errno):
            "TimerThread '\(name)' refused a call: the system would not start its thread (errno \(errno))"
        }
    }
}
