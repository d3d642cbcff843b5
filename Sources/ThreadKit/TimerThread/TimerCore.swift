import Synchronization

/// The state and the thread of one ``TimerThread``: what its thread and its handles hold on to.
///
/// A ``TimerThread`` is a front that owns its core. The timer thread and every ``TimerHandle``
/// reference the core, never the front, so a private timer its user lets go of is deinitialised
/// like any object, and tells its core with ``release()``. The core then runs the one-shot calls
/// still pending (each handle can still cancel its own), stops the repeating ones, and its thread
/// exits once no call is left. A handle keeps the core's memory, not its thread.
///
/// One mutex guards the heap and everything in `state`. A cancel takes no lock: it moves its
/// handle's atomic state on (see ``TimerCallState``) and leaves the entry in the heap, dead; the
/// timer thread drops dead entries as they reach the top, and a sweep drops them all once they are
/// more than half the heap (``TimerHeap/needsSweep(cancelled:stored:)``), so pending memory stays
/// within twice the live calls. The mutex is never held while a call runs, nor while a closure, a
/// tag or a handle that may hold the last reference to one is released: their `deinit` may call
/// back into the timer. Locked sections move such things out into ``Leftovers`` and their callers
/// release them after unlocking. (A dead entry's handle may be released under the mutex: its
/// closure is gone, or its canceller, still in `cancel()`, holds the handle and releases it.)
final class TimerCore: @unchecked Sendable {
    // Sendable: `state` is guarded by `mutex`; the atomics and constants need no lock; a handle's
    // closure belongs to whoever moved its state on last (see `TimerHandle`).

    let name: String
    let mutex = PThreadMutex()
    let wakeUp = MonotonicCondition()
    /// Guarded by `mutex`; the timer thread's loop is in `TimerCore+Thread.swift`.
    var state = State()
    /// Calls stopped while waiting whose entries stayed in the heap: cancels by handle and by tag.
    /// Wrapping; with `state.dropped`, it gives how many heap entries are dead.
    private let heapCancels = Atomic<UInt64>(0)
    /// The value of `heapCancels` from which a sweep may be due: a cancel that reaches it takes the
    /// mutex to see. Written under the mutex when the heap shrinks; an insert leaves it low, which
    /// costs at most one needless look.
    private let sweepDue = Atomic<UInt64>(1)
    /// Set, under the mutex, when the front is released: a cancel then wakes the thread, which
    /// exits once no live call is left. Sequentially consistent with the cancel's exchange, so of
    /// a cancel and a release one sees the other.
    private let windingDown = Atomic<Bool>(false)

    enum Lifecycle {
        /// No call yet, so no thread.
        case notStarted
        /// The thread runs calls as they fall due.
        case running
        /// The ``TimerThread`` was released without `dispose()`: nothing new arrives; the thread
        /// runs the one-shot calls still pending and exits once none is left.
        case released
        /// Disposed: the thread exits after the call it is running, if any.
        case disposed
    }

    struct State: ~Copyable {
        var lifecycle = Lifecycle.notStarted
        var heap = TimerHeap<TimerHandle>()
        /// Dead entries that left the heap (wrapping), against `heapCancels`.
        var dropped: UInt64 = 0
        /// The pending and running calls of each tag, for `cancelAll(tag:)`.
        var tagged: [AnyHashable: Set<TimerHandle>] = [:]
        /// The tag of each tagged call in `tagged`.
        var tags: [ObjectIdentifier: AnyHashable] = [:]
        /// The call running on the timer thread now, if any.
        var running: TimerHandle?
        /// What ``Diagnostics`` shows of the calls.
        var metrics = TimerMetrics()
        /// The timer thread's activity, while it runs.
        var activity: ThreadActivity?
        /// How near a deadline the thread spins for rather than sleeps.
        var spinWindow = TimerSpinWindow()
    }

    /// What a locked section took out of the timer for its caller to release once it has unlocked.
    ///
    /// Closures, and the tags and handles that may hold the last reference to something a user
    /// made, can run a `deinit` that calls back into this timer (cancels a call, reads
    /// `pendingCount`). Released under the mutex, that would deadlock.
    private struct Leftovers {
        var closures: [@Sendable () -> Void] = []
        var tags: [AnyHashable] = []
        var handles: [TimerHandle] = []
        var tagged: [AnyHashable: Set<TimerHandle>] = [:]
        var tagsByCall: [ObjectIdentifier: AnyHashable] = [:]
    }

    /// Whether this is ``TimerThread/shared``'s core.
    let isShared: Bool

    init(name: String, isShared: Bool = false) {
        self.name = name
        self.isShared = isShared
    }

    // MARK: - Calls

    /// Adds a call due at `deadline`, starting the thread with the first one.
    ///
    /// The thread is started under the mutex: no other call can slip in between a start and its
    /// failure, so a refused start leaves the timer as it was (not started, no call pending) and
    /// the next call tries again. `pthread_create` calls out to nothing, and this happens once.
    ///
    /// - Returns: The call's handle.
    /// - Throws: ``TimerThreadError/disposed(name:)`` if the timer is disposed or released;
    ///   ``TimerThreadError/threadStartFailed(name:errno:)`` if its thread was to start and the
    ///   system refused. Either way the handle, its closure and the tag are released with the mutex
    ///   not held.
    func add(
        _ work: @escaping @Sendable () -> Void, repetition: TimerHandle.Repetition?, tag: (any Hashable & Sendable)?,
        deadline: MonotonicInstant
    ) throws(TimerThreadError) -> TimerHandle {
        let handle = TimerHandle(core: self, repetition: repetition, isTagged: tag != nil, work: work)
        let tag = tag.map { AnyHashable($0) }
        let outcome: Result<Void, TimerThreadError> = mutex.withLock {
            switch state.lifecycle {
            case .disposed, .released:
                return .failure(.disposed(name: name))
            case .notStarted:
                do throws(ThreadStartError) {
                    try NamedThread.start(name: name) { [self] in
                        // Its records go to the log's delivery thread: a delegate never runs here.
                        LogDelivery.markCurrentThreadShared()
                        Log.log(.timer, "\(name): the timer thread started")
                        runTimerThread()
                    }
                } catch {
                    return .failure(.threadStartFailed(name: name, errno: error.errno))
                }
                state.lifecycle = .running
            case .running:
                break
            }
            let isFirst = state.heap.insert(handle, deadline: deadline)
            state.metrics.recordScheduled()
            if let tag {
                state.tagged[tag, default: []].insert(handle)
                state.tags[ObjectIdentifier(handle)] = tag
            }
            if isFirst { wakeUp.signal() }  // the new earliest deadline
            return .success(())
        }
        switch outcome {
        case .success:
            return handle
        case .failure(let error):
            if case .threadStartFailed(_, let errno) = error {
                Log.log(.timer, "\(name): the timer thread could not start (errno \(errno))")
            }
            throw error
        }
    }

    /// Stops `handle` if it would run again; see ``TimerHandle/cancel()``.
    ///
    /// A waiting call is stopped without the mutex: the exchange of its state makes this thread
    /// the owner of its closure, released here, and its entry stays in the heap, dead. The mutex is
    /// taken only to untag a tagged call, to sweep the heap when dead entries may be half of it, to
    /// wake a released timer's thread (this may have been its last call), and to count the cancel
    /// of a repeating call during its run.
    func cancel(_ handle: TimerHandle) -> Bool {
        let (from, to) = handle.advance { $0.cancelled(repeating: handle.isRepeating) }
        guard to != nil else { return false }
        guard from.phase == .scheduled else {
            // A repeating call during its run: the timer thread releases its closure after the run.
            let tags = mutex.withLock {
                state.metrics.recordCancelled(1)
                return untag(handle)
            }
            withExtendedLifetime(tags) {}  // released here, with the mutex not held
            return true
        }
        let work = handle.work.take()
        let cancels = heapCancels.wrappingAdd(1, ordering: .relaxed).newValue
        if handle.isTagged || cancels >= sweepDue.load(ordering: .relaxed)
            || windingDown.load(ordering: .sequentiallyConsistent) {
            let tags = mutex.withLock {
                sweepIfDue()
                if case .released = state.lifecycle { wakeUp.signal() }
                return untag(handle)
            }
            withExtendedLifetime(tags) {}  // released here, with the mutex not held
        }
        withExtendedLifetime(work) {}  // released here, with the mutex not held
        return true
    }

    /// How many heap entries are dead. Mutex held. For a moment, while a cancel has exchanged its
    /// call's state and not yet counted it, this can be one short, or (once the thread dropped
    /// that entry) one over.
    private var cancelledInHeap: Int {
        Int(truncatingIfNeeded: heapCancels.load(ordering: .relaxed) &- state.dropped)
    }

    /// Drops the heap's dead entries if they are more than half of it, and sets the count of
    /// cancels from which the next sweep may be due. Mutex held; called where the heap shrinks.
    func sweepIfDue() {
        if TimerHeap<TimerHandle>.needsSweep(cancelled: cancelledInHeap, stored: state.heap.count) {
            state.dropped &+= UInt64(state.heap.removeCancelled())
        }
        sweepDue.store(state.dropped &+ UInt64(state.heap.count / 2) &+ 1, ordering: .relaxed)
    }

    /// Stops every call scheduled with `tag`; see ``TimerThread/cancelAll(tag:)``.
    func cancelAll(tag: AnyHashable) -> Int {
        let (count, leftovers) = mutex.withLock { () -> (Int, Leftovers) in
            var leftovers = Leftovers()
            guard let index = state.tagged.index(forKey: tag) else { return (0, leftovers) }
            let (key, handles) = state.tagged.remove(at: index)
            leftovers.tags.append(key)
            var count = 0
            for handle in handles {
                if let tag = state.tags.removeValue(forKey: ObjectIdentifier(handle)) { leftovers.tags.append(tag) }
                let (from, to) = handle.advance { $0.cancelled(repeating: handle.isRepeating) }
                guard to != nil else { continue }
                count += 1
                if from.phase == .scheduled {
                    if let work = handle.work.take() { leftovers.closures.append(work) }
                    heapCancels.wrappingAdd(1, ordering: .relaxed)  // its entry stays, dead
                } else {
                    state.metrics.recordCancelled(1)  // a repeating call during its run
                }
            }
            leftovers.handles.append(contentsOf: handles)
            sweepIfDue()
            return (count, leftovers)
        }
        withExtendedLifetime(leftovers) {}  // released here, with the mutex not held
        return count
    }

    /// Stops the timer; see ``TimerThread/dispose()``.
    ///
    /// - Returns: How many calls will never run (a repeating call running now among them), or `nil`
    ///   if it was disposed already.
    func dispose() -> Int? {
        let (dropped, leftovers) = mutex.withLock { () -> (Int?, Leftovers) in
            var leftovers = Leftovers()
            if case .disposed = state.lifecycle { return (nil, leftovers) }
            state.lifecycle = .disposed
            let count = stop(dropped: state.heap.removeAll(), into: &leftovers)
            sweepIfDue()
            return (count, leftovers)
        }
        withExtendedLifetime(leftovers) {}  // released here, with the mutex not held
        if let dropped { Log.log(.timer, "\(name): disposed; \(dropped) pending calls will not run") }
        return dropped
    }

    /// Cancels `dropped`, entries just taken out of the heap, and a repeating call running now (it
    /// stops after this run); moves their closures, the handles and the tag tables into `leftovers`
    /// and wakes the thread. Mutex held.
    ///
    /// - Returns: How many calls will never run (again): the dead entries among `dropped` (calls
    ///   cancelled before) are not counted.
    private func stop(dropped: [TimerHandle], into leftovers: inout Leftovers) -> Int {
        var count = 0
        for handle in dropped {
            if handle.advance({ $0.cancelled(repeating: handle.isRepeating) }).to != nil {
                count += 1
                if let work = handle.work.take() { leftovers.closures.append(work) }
            } else {
                state.dropped &+= 1  // a dead entry
            }
        }
        if let running = state.running, running.isRepeating,
           running.advance({ $0.cancelled(repeating: true) }).to != nil {
            count += 1
        }
        leftovers.handles = dropped
        state.metrics.recordCancelled(count)
        swap(&leftovers.tagged, &state.tagged)
        swap(&leftovers.tagsByCall, &state.tags)
        wakeUp.signal()
        return count
    }

    /// The ``TimerThread`` is gone without `dispose()`: nothing can schedule on this timer or
    /// dispose of it any more.
    ///
    /// One-shot calls still run when due, and each can still be cancelled through its handle.
    /// Repeating calls stop (one running now finishes its run), as do calls due so far out that
    /// they would never run: either would keep the thread forever, and nothing but their handles
    /// could stop them. The thread exits once no call is left.
    func release() {
        let outcome: (stopped: Int, remaining: Int, leftovers: Leftovers)? = mutex.withLock {
            switch state.lifecycle {
            case .notStarted:
                state.lifecycle = .released  // no call, no thread: nothing to wind down
                return nil
            case .released, .disposed:
                return nil
            case .running:
                break
            }
            state.lifecycle = .released
            windingDown.store(true, ordering: .sequentiallyConsistent)
            var leftovers = Leftovers()
            let (stopped, cancelled) = state.heap.removeAll { handle, deadline in
                handle.isRepeating || deadline >= .distantFuture
            }
            state.dropped &+= UInt64(cancelled)
            // Only cancelAll(tag:) reads the tag tables, and nothing can call it now.
            let count = stop(dropped: stopped, into: &leftovers)
            sweepIfDue()
            return (count, state.heap.count, leftovers)
        }
        guard let outcome else { return }
        withExtendedLifetime(outcome.leftovers) {}  // released here, with the mutex not held
        Log.log(.timer, "\(name): released without dispose(); \(outcome.stopped) repeating or never-due calls stopped, \(outcome.remaining) pending calls still run, then the thread exits")
    }

    /// How many calls will run (again): those waiting for their deadline, and a repeating call
    /// running now unless it was cancelled. A repeating call counts once.
    var pendingCount: Int {
        mutex.withLock { lockedPendingCount }
    }

    /// How many entries the heap stores, dead ones included: what the memory bound is about.
    var storedEntryCount: Int {
        mutex.withLock { state.heap.count }
    }

    /// ``pendingCount``, mutex held: the live heap entries, and a repeating call running now unless
    /// it was cancelled.
    private var lockedPendingCount: Int {
        let runningRepeats = state.running.map { $0.isRepeating && $0.callState.phase == .running } ?? false
        return max(0, state.heap.count - cancelledInHeap) + (runningRepeats ? 1 : 0)
    }

    /// Removes `handle` from the tag tables, if it is there. Mutex held.
    ///
    /// - Returns: The tag instances the tables held for it, for the caller to release unlocked.
    func untag(_ handle: TimerHandle) -> (AnyHashable?, AnyHashable?) {
        guard handle.isTagged, let tag = state.tags.removeValue(forKey: ObjectIdentifier(handle)),
              let index = state.tagged.index(forKey: tag) else { return (nil, nil) }
        state.tagged.values[index].remove(handle)
        guard state.tagged.values[index].isEmpty else { return (tag, nil) }
        // The table's key may be another instance of an equal tag, given by an earlier call.
        return (tag, state.tagged.remove(at: index).key)
    }

    // MARK: - Diagnostics

    /// What one hold of the mutex copies for ``TimerThread``'s entry in a snapshot: the counts,
    /// the `limit` earliest calls (from the heap's top, never sorting it) with their tags, the thread.
    func diagnosticsReading(next limit: Int) -> TimerReading {
        mutex.withLock {
            let next = state.heap.earliest(limit).map { deadline, handle in
                TimerReading.Call(
                    deadline: deadline, tag: handle.isTagged ? state.tags[ObjectIdentifier(handle)] : nil,
                    interval: handle.repetition?.interval)
            }
            var metrics = state.metrics
            metrics.recordCancelled(Int(clamping: heapCancels.load(ordering: .relaxed)))
            return TimerReading(pending: lockedPendingCount, next: next, metrics: metrics, activity: state.activity)
        }
    }
}
