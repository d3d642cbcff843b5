/// A thread that runs delayed and repeating calls, each cancellable through its ``TimerHandle``.
///
/// Calls run on the timer thread one at a time, in deadline order (equal deadlines in the order
/// they were scheduled), never before their deadline. Keep them short: a long call delays the
/// ones after it. The thread sleeps on a condition until the earliest deadline (it never polls)
/// and starts with the first scheduled call.
///
/// ```swift
/// let handle = try TimerThread.shared.schedule(after: .seconds(5)) { print("timed out") }
/// if handle.cancel() { print("stopped in time") }
/// ```
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
        self.core = TimerCore(name: name)
    }

    deinit {
        core.release()
    }

    // MARK: - Scheduling

    /// Runs `work` once, `delay` after this call.
    ///
    /// - Parameters:
    ///   - delay: Counted from this call; not negative.
    ///   - tag: Groups calls for ``cancelAll(tag:)``.
    ///   - work: Runs on the timer thread.
    /// - Returns: The call's handle.
    /// - Throws: ``TimerThreadError/disposed(name:)`` after ``dispose()``.
    @discardableResult
    public func schedule(
        after delay: Duration, tag: (any Hashable & Sendable)? = nil,
        _ work: @escaping @Sendable () -> Void
    ) throws -> TimerHandle {
        precondition(delay >= .zero, "TimerThread '\(name)': delay must not be negative, got \(delay)")
        return try add(work, interval: nil, tag: tag, deadline: MonotonicInstant.now().advanced(by: delay))
    }

    /// Runs `work` once at `deadline`, or at once if it has passed.
    ///
    /// - Parameters:
    ///   - deadline: When to run.
    ///   - tag: Groups calls for ``cancelAll(tag:)``.
    ///   - work: Runs on the timer thread.
    /// - Returns: The call's handle.
    /// - Throws: ``TimerThreadError/disposed(name:)`` after ``dispose()``.
    @discardableResult
    public func schedule(
        at deadline: ContinuousClock.Instant, tag: (any Hashable & Sendable)? = nil,
        _ work: @escaping @Sendable () -> Void
    ) throws -> TimerHandle {
        try add(work, interval: nil, tag: tag, deadline: MonotonicInstant(deadline))
    }

    /// Runs `work` every `interval`, the first time one `interval` after this call, until cancelled.
    ///
    /// The rate is fixed: runs are due at whole multiples of `interval` from this call. A run that is
    /// late does not shift the ones after it, and beats missed entirely are skipped, not bunched.
    ///
    /// - Parameters:
    ///   - interval: The period; more than zero.
    ///   - tag: Groups calls for ``cancelAll(tag:)``.
    ///   - work: Runs on the timer thread.
    /// - Returns: The handle that stops the repetition.
    /// - Throws: ``TimerThreadError/disposed(name:)`` after ``dispose()``.
    @discardableResult
    public func schedule(
        every interval: Duration, tag: (any Hashable & Sendable)? = nil,
        _ work: @escaping @Sendable () -> Void
    ) throws -> TimerHandle {
        precondition(interval > .zero, "TimerThread '\(name)': interval must be more than zero, got \(interval)")
        return try add(work, interval: interval, tag: tag, deadline: MonotonicInstant.now().advanced(by: interval))
    }

    /// Cancels every pending or repeating call scheduled with `tag`.
    ///
    /// - Returns: How many calls this stopped.
    @discardableResult
    public func cancelAll(tag: some Hashable & Sendable) -> Int {
        core.cancelAll(tag: AnyHashable(tag))
    }

    /// Stops the timer: pending calls are dropped and its thread exits after any call now running.
    ///
    /// Every dropped call's handle reports ``TimerHandle/isCancelled``. A repeating call running at
    /// this moment finishes its run and does not run again; its handle reports `isCancelled` too, but
    /// it is not counted as pending. Later `schedule` calls throw. ``shared`` cannot be disposed.
    ///
    /// - Returns: How many pending calls will never run.
    @discardableResult
    public func dispose() -> Int {
        precondition(!isShared, "TimerThread.shared is never disposed; make a TimerThread(name:) of your own to dispose")
        return core.dispose() ?? 0
    }

    /// How many calls wait for their deadline (repeating calls count once).
    public var pendingCount: Int {
        core.pendingCount
    }

    private func add(
        _ work: @escaping @Sendable () -> Void, interval: Duration?, tag: (any Hashable & Sendable)?,
        deadline: MonotonicInstant
    ) throws(TimerThreadError) -> TimerHandle {
        guard let handle = core.add(work, interval: interval, tag: tag, deadline: deadline) else {
            throw .disposed(name: name)
        }
        return handle
    }
}

/// Why a ``TimerThread`` refused a call.
public enum TimerThreadError: Error, Equatable, CustomStringConvertible {
    /// The timer was disposed; it accepts no more calls.
    case disposed(name: String)

    public var description: String {
        switch self {
        case .disposed(let name):
            "TimerThread '\(name)' is disposed and accepts no more calls"
        }
    }
}
