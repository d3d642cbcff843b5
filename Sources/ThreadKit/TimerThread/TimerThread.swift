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
public final class TimerThread: @unchecked Sendable {
    // Sendable: `state`, and every `TimerHandle`'s vars, are guarded by `mutex`.

    /// The process-wide timer thread, started on first use and never disposed.
    public static let shared = TimerThread(name: "ThreadKit Timer", isShared: true)

    /// The timer's name: its thread's name, and the name in its log lines and errors.
    public let name: String

    let mutex = PThreadMutex()
    private let wakeUp = MonotonicCondition()
    private let isShared: Bool
    private var state = State()

    private enum Lifecycle {
        case notStarted, running, disposed
    }

    private struct State {
        var lifecycle = Lifecycle.notStarted
        var heap = TimerHeap<TimerHandle>()
        /// The pending and running calls of each tag, for ``cancelAll(tag:)``.
        var tagged: [AnyHashable: Set<TimerHandle>] = [:]
        /// The tag of each tagged call in `tagged`.
        var tags: [ObjectIdentifier: AnyHashable] = [:]
        /// The call running on the timer thread now, if any.
        var running: TimerHandle?
    }

    /// Creates a private timer; its thread starts with the first call and runs until ``dispose()``.
    ///
    /// - Parameter name: Names the thread, log lines and errors.
    public convenience init(name: String) {
        self.init(name: name, isShared: false)
    }

    private init(name: String, isShared: Bool) {
        self.name = name
        self.isShared = isShared
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
        mutex.withLock {
            guard let handles = state.tagged.removeValue(forKey: AnyHashable(tag)) else { return 0 }
            return handles.reduce(0) { count, handle in
                state.tags[ObjectIdentifier(handle)] = nil
                return count + (stop(handle) ? 1 : 0)
            }
        }
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
        let dropped: Int? = mutex.withLock {
            if case .disposed = state.lifecycle { return nil }
            state.lifecycle = .disposed
            let pending = state.heap.removeAll()
            for handle in pending {
                handle.phase = .cancelled
                handle.work = nil
            }
            if let running = state.running, running.interval != nil, running.phase == .running {
                running.phase = .cancelled  // a repeating call running now: it stops after this run
            }
            state.tagged.removeAll()
            state.tags.removeAll()
            wakeUp.signal()
            return pending.count
        }
        guard let dropped else { return 0 }
        Log.log(.timer, "\(name): disposed; \(dropped) pending calls will not run")
        return dropped
    }

    /// How many calls wait for their deadline (repeating calls count once).
    public var pendingCount: Int {
        mutex.withLock { state.heap.count }
    }

    // MARK: - Internals

    private func add(
        _ work: @escaping @Sendable () -> Void, interval: Duration?, tag: (any Hashable & Sendable)?,
        deadline: MonotonicInstant
    ) throws(TimerThreadError) -> TimerHandle {
        let handle = TimerHandle(timer: self, interval: interval, isTagged: tag != nil, work: work)
        let tag = tag.map { AnyHashable($0) }
        let startThread = try mutex.withLock { () throws(TimerThreadError) -> Bool in
            let startThread: Bool
            switch state.lifecycle {
            case .disposed: throw .disposed(name: name)
            case .notStarted:
                state.lifecycle = .running
                startThread = true
            case .running:
                startThread = false
            }
            state.heap.insert(handle, deadline: deadline)
            if let tag {
                state.tagged[tag, default: []].insert(handle)
                state.tags[ObjectIdentifier(handle)] = tag
            }
            if handle.heapIndex == 0 { wakeUp.signal() }  // the new earliest deadline
            return startThread
        }
        if startThread {
            Log.log(.timer, "\(name): starting the timer thread")
            do {
                try NamedThread.start(name: name) { [self] in runTimerThread() }
            } catch {
                // No thread: take this call back, and let the next call try to start the thread.
                let work: (@Sendable () -> Void)? = mutex.withLock {
                    state.lifecycle = .notStarted
                    state.heap.remove(handle)
                    untag(handle)
                    handle.phase = .cancelled
                    return handle.work.take()
                }
                _ = work
                Log.log(.timer, "\(name): the timer thread could not start (errno \(error.errno))")
                throw .threadStartFailed(name: name, errno: error.errno)
            }
        }
        return handle
    }

    func cancel(_ handle: TimerHandle) -> Bool {
        mutex.withLock {
            guard stop(handle) else { return false }
            untag(handle)
            return true
        }
    }

    /// Stops `handle` if it would run again; the caller holds the mutex and tidies the tag table.
    private func stop(_ handle: TimerHandle) -> Bool {
        switch handle.phase {
        case .scheduled:
            state.heap.remove(handle)
            handle.work = nil
        case .running where handle.interval != nil:
            break  // the timer thread sees `.cancelled` after this run and drops the call
        case .running, .fired, .cancelled:
            return false
        }
        handle.phase = .cancelled
        return true
    }

    /// The timer thread: sleep until the earliest deadline, run what is due, repeat until disposed.
    private func runTimerThread() {
        mutex.lock()
        while true {
            if case .disposed = state.lifecycle { break }
            guard let (deadline, handle) = state.heap.first else {
                _blockingWaitForCalls()
                continue
            }
            let now = MonotonicInstant.now()
            guard deadline <= now else {
                _blockingWaitForDeadline(deadline)
                continue
            }
            _ = state.heap.popFirst(dueAt: now)
            handle.phase = .running
            handle.hasRun = true
            state.running = handle
            let work = handle.work!
            if handle.interval == nil {
                handle.work = nil
                untag(handle)
            }
            mutex.unlock()

            let lateness = deadline.duration(to: now)
            if lateness > .milliseconds(10) {
                Log.log(.timer, "\(name): a call fired \(lateness) late")
            }
            work()

            mutex.lock()
            finishRun(of: handle, dueAt: deadline)
        }
        mutex.unlock()
        Log.log(.timer, "\(name): the timer thread exits")
    }

    /// Sends a finished call on: the next beat of a repeating call, or done. Mutex held.
    private func finishRun(of handle: TimerHandle, dueAt deadline: MonotonicInstant) {
        state.running = nil
        guard handle.phase == .running else {
            untag(handle)  // cancelled while running
            handle.work = nil
            return
        }
        guard let interval = handle.interval else {
            handle.phase = .fired
            return
        }
        handle.phase = .scheduled
        let next = RepeatSchedule.nextDeadline(after: deadline, interval: interval, now: .now())
        state.heap.insert(handle, deadline: next)
    }

    /// Removes `handle` from the tag tables, if it is there. Mutex held.
    private func untag(_ handle: TimerHandle) {
        guard handle.isTagged, let tag = state.tags.removeValue(forKey: ObjectIdentifier(handle)) else { return }
        state.tagged[tag]?.remove(handle)
        if state.tagged[tag]?.isEmpty == true { state.tagged[tag] = nil }
    }

    private func _blockingWaitForCalls() {
        wakeUp.wait(mutex)
    }

    private func _blockingWaitForDeadline(_ deadline: MonotonicInstant) {
        wakeUp.wait(mutex, until: deadline)
    }
}

/// Why a ``TimerThread`` refused a call.
public enum TimerThreadError: Error, Equatable, CustomStringConvertible {
    /// The timer was disposed; it accepts no more calls.
    case disposed(name: String)
    /// The timer's thread was not running and the system refused to start it: `errno` is
    /// `pthread_create`'s error. The next call tries again.
    case threadStartFailed(name: String, errno: Int32)

    public var description: String {
        switch self {
        case .disposed(let name):
            "TimerThread '\(name)' is disposed and accepts no more calls"
        case .threadStartFailed(let name, let errno):
            "TimerThread '\(name)' refused a call: the system would not start its thread (errno \(errno))"
        }
    }
}
