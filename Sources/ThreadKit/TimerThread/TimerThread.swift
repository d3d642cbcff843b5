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
        let (count, leftovers) = mutex.withLock { () -> (Int, Leftovers) in
            var leftovers = Leftovers()
            guard let index = state.tagged.index(forKey: AnyHashable(tag)) else { return (0, leftovers) }
            let (key, handles) = state.tagged.remove(at: index)
            leftovers.tags.append(key)
            var count = 0
            for handle in handles {
                if let tag = state.tags.removeValue(forKey: ObjectIdentifier(handle)) { leftovers.tags.append(tag) }
                let (stopped, work) = stop(handle)
                if stopped { count += 1 }
                if let work { leftovers.closures.append(work) }
            }
            leftovers.handles.append(contentsOf: handles)
            return (count, leftovers)
        }
        withExtendedLifetime(leftovers) {}  // released here, with the mutex not held
        return count
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
        let (dropped, leftovers) = mutex.withLock { () -> (Int?, Leftovers) in
            var leftovers = Leftovers()
            if case .disposed = state.lifecycle { return (nil, leftovers) }
            state.lifecycle = .disposed
            let pending = state.heap.removeAll()
            for handle in pending {
                handle.phase = .cancelled
                if let work = handle.work.take() { leftovers.closures.append(work) }
            }
            if let running = state.running, running.interval != nil, running.phase == .running {
                running.phase = .cancelled  // a repeating call running now: it stops after this run
            }
            leftovers.handles = pending
            swap(&leftovers.tagged, &state.tagged)
            swap(&leftovers.tagsByCall, &state.tags)
            wakeUp.signal()
            return (pending.count, leftovers)
        }
        withExtendedLifetime(leftovers) {}  // released here, with the mutex not held
        guard let dropped else { return 0 }
        Log.log(.timer, "\(name): disposed; \(dropped) pending calls will not run")
        return dropped
    }

    /// How many calls wait for their deadline (repeating calls count once).
    public var pendingCount: Int {
        mutex.withLock { state.heap.count }
    }

    // MARK: - Internals

    /// What a locked section took out of the timer for its caller to release once it has unlocked.
    ///
    /// Closures, and the tags and handles that may hold the last reference to something a user
    /// made, can run a `deinit` that calls back into this timer (cancels a call, reads
    /// ``pendingCount``). Released under the mutex, that would deadlock; so they are moved out
    /// under the mutex and released after unlocking.
    private struct Leftovers {
        var closures: [@Sendable () -> Void] = []
        var tags: [AnyHashable] = []
        var handles: [TimerHandle] = []
        var tagged: [AnyHashable: Set<TimerHandle>] = [:]
        var tagsByCall: [ObjectIdentifier: AnyHashable] = [:]
    }

    private func add(
        _ work: @escaping @Sendable () -> Void, interval: Duration?, tag: (any Hashable & Sendable)?,
        deadline: MonotonicInstant
    ) throws(TimerThreadError) -> TimerHandle {
        let handle = TimerHandle(timer: self, interval: interval, isTagged: tag != nil, work: work)
        let tag = tag.map { AnyHashable($0) }
        let startThread: Bool? = mutex.withLock {
            let startThread: Bool
            switch state.lifecycle {
            case .disposed: return nil
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
        // Refused: the handle, its closure and the tag are released as this throws, unlocked.
        guard let startThread else { throw .disposed(name: name) }
        if startThread {
            Log.log(.timer, "\(name): starting the timer thread")
            NamedThread.start(name: name) { [self] in runTimerThread() }
        }
        return handle
    }

    func cancel(_ handle: TimerHandle) -> Bool {
        let (stopped, work, tags) = mutex.withLock {
            () -> (Bool, (@Sendable () -> Void)?, (AnyHashable?, AnyHashable?)) in
            let (stopped, work) = stop(handle)
            return (stopped, work, stopped ? untag(handle) : (nil, nil))
        }
        withExtendedLifetime((work, tags)) {}  // released here, with the mutex not held
        return stopped
    }

    /// Stops `handle` if it would run again. The caller holds the mutex, tidies the tag table and
    /// releases the returned closure once it has unlocked.
    private func stop(_ handle: TimerHandle) -> (stopped: Bool, work: (@Sendable () -> Void)?) {
        switch handle.phase {
        case .scheduled:
            state.heap.remove(handle)
            handle.phase = .cancelled
            return (true, handle.work.take())
        case .running where handle.interval != nil:
            handle.phase = .cancelled  // the timer thread drops the call after this run
            return (true, nil)
        case .running, .fired, .cancelled:
            return (false, nil)
        }
    }

    /// A call taken off the heap to run now.
    private struct DueCall {
        let handle: TimerHandle
        let work: @Sendable () -> Void
        let deadline: MonotonicInstant
        let now: MonotonicInstant
        /// A one-shot call's tag, out of the tag tables, to release unlocked.
        var tags: (AnyHashable?, AnyHashable?)
    }

    /// The timer thread: sleep until the earliest deadline, run what is due, repeat until disposed.
    ///
    /// The mutex is held only inside ``_blockingWaitForDueCall()`` and ``finishRun(of:dueAt:)``;
    /// the call runs, and every closure, tag and handle is released, with it unlocked.
    private func runTimerThread() {
        while var call = _blockingWaitForDueCall() {
            call.tags = (nil, nil)  // a one-shot call's tag: released unlocked, before it runs
            let lateness = call.deadline.duration(to: call.now)
            if lateness > .milliseconds(10) {
                Log.log(.timer, "\(name): a call fired \(lateness) late")
            }
            call.work()
            let cancelledWork = mutex.withLock { finishRun(of: call.handle, dueAt: call.deadline) }
            // Released here, unlocked: the closure of a repeating call cancelled during this run,
            // and then this loop's own references to the call and its closure.
            withExtendedLifetime((cancelledWork, call)) {}
        }
        Log.log(.timer, "\(name): the timer thread exits")
    }

    /// Waits until a call is due and takes it off the heap, or returns `nil` once the thread should exit.
    private func _blockingWaitForDueCall() -> DueCall? {
        mutex.lock()
        defer { mutex.unlock() }
        while true {
            if case .disposed = state.lifecycle { return nil }
            guard let deadline = state.heap.firstDeadline else {
                _blockingWaitForCalls()
                continue
            }
            let now = MonotonicInstant.now()
            guard deadline <= now else {
                _blockingWaitForDeadline(deadline)
                continue
            }
            let handle = state.heap.popFirst(dueAt: now)!
            handle.phase = .running
            handle.hasRun = true
            state.running = handle
            if handle.interval != nil {
                return DueCall(handle: handle, work: handle.work!, deadline: deadline, now: now, tags: (nil, nil))
            }
            // A one-shot call gives up its closure and its tag now; they leave with the DueCall.
            return DueCall(handle: handle, work: handle.work.take()!, deadline: deadline, now: now, tags: untag(handle))
        }
    }

    /// Sends a finished call on: the next beat of a repeating call, or done. Mutex held.
    ///
    /// - Returns: The closure of a repeating call cancelled during this run, for the caller to
    ///   release once it has unlocked.
    private func finishRun(of handle: TimerHandle, dueAt deadline: MonotonicInstant) -> (@Sendable () -> Void)? {
        state.running = nil
        guard handle.phase == .running else {
            return handle.work.take()  // cancelled while running (its tag went with the cancel)
        }
        guard let interval = handle.interval else {
            handle.phase = .fired
            return nil
        }
        handle.phase = .scheduled
        let next = RepeatSchedule.nextDeadline(after: deadline, interval: interval, now: .now())
        state.heap.insert(handle, deadline: next)
        return nil
    }

    /// Removes `handle` from the tag tables, if it is there. Mutex held.
    ///
    /// - Returns: The tag instances the tables held for it, for the caller to release unlocked.
    private func untag(_ handle: TimerHandle) -> (AnyHashable?, AnyHashable?) {
        guard handle.isTagged, let tag = state.tags.removeValue(forKey: ObjectIdentifier(handle)),
              let index = state.tagged.index(forKey: tag) else { return (nil, nil) }
        state.tagged.values[index].remove(handle)
        guard state.tagged.values[index].isEmpty else { return (tag, nil) }
        // The table's key may be another instance of an equal tag, given by an earlier call.
        return (tag, state.tagged.remove(at: index).key)
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

    public var description: String {
        switch self {
        case .disposed(let name):
            "TimerThread '\(name)' is disposed and accepts no more calls"
        }
    }
}
