// The timer thread's loop: sleep until the earliest deadline (or spin, when it is very near), run
// what is due, send repeating calls on.

extension TimerCore {
    /// A call taken off the heap to run now.
    struct DueCall {
        let handle: TimerHandle
        let work: @Sendable () -> Void
        let deadline: MonotonicInstant
        let now: MonotonicInstant
        /// A one-shot call's tag, out of the tag tables, to release unlocked.
        var tags: (AnyHashable?, AnyHashable?)
    }

    /// The timer thread: sleep until the earliest deadline, run what is due, repeat until disposed,
    /// or until released with no call left.
    ///
    /// The mutex is held only inside ``_blockingWaitForDueCall()`` and
    /// ``finishRun(of:dueAt:returnedAt:)``;
    /// calls run, and closures, tags and handles are released, with it unlocked.
    func runTimerThread() {
        mutex.withLock { state.activity = ThreadActivity.current }
        while var call = _blockingWaitForDueCall() {
            call.tags = (nil, nil)  // a one-shot call's tag: released unlocked, before it runs
            let lateness = call.deadline.duration(to: call.now)
            if lateness > .milliseconds(10) {
                Log.log(.timer, "\(name): a call fired \(lateness) late")
            }
            call.work()
            let returned = MonotonicInstant.now()
            let cancelledWork = mutex.withLock {
                state.metrics.recordFired(lateness: Int64(bitPattern: call.now.nanoseconds &- call.deadline.nanoseconds))
                return finishRun(of: call.handle, dueAt: call.deadline, returnedAt: returned)
            }
            // Released here, unlocked: the closure of a repeating call cancelled during this run,
            // and then this loop's own references to the call and its closure.
            withExtendedLifetime((cancelledWork, call)) {}
        }
        // Released unlocked: the last reference to the activity takes the activities' lock.
        let activity = mutex.withLock { state.activity.take() }
        withExtendedLifetime(activity) {}
        Log.log(.timer, "\(name): the timer thread exits")
    }

    /// Waits until a call is due and takes it off the heap, or returns `nil` once the thread should exit.
    func _blockingWaitForDueCall() -> DueCall? {
        mutex.lock()
        defer { mutex.unlock() }
        while true {
            if case .disposed = state.lifecycle { return nil }
            if state.heap.first?.element.isCancelled == true {
                state.dropped &+= UInt64(state.heap.dropCancelledFromTop())
                sweepIfDue()
            }
            // Once released, the thread exits when no live call is left: the top is live, if any.
            if case .released = state.lifecycle, state.heap.isEmpty { return nil }
            guard let deadline = state.heap.firstDeadline else {
                _blockingWaitForCalls()
                continue
            }
            let now = MonotonicInstant.now()
            guard deadline <= now else {
                if state.spinWindow.spins(for: now.duration(to: deadline)) {
                    spinUntil(deadline)
                } else {
                    _blockingWaitForDeadline(deadline)
                }
                continue
            }
            let handle = state.heap.popFirst(dueAt: now)!
            sweepIfDue()
            guard handle.advance({ $0.started() }).to != nil else {
                state.dropped &+= 1  // cancelled since the look at the top
                continue
            }
            state.running = handle
            if handle.isRepeating {
                return DueCall(handle: handle, work: handle.work!, deadline: deadline, now: now, tags: (nil, nil))
            }
            // A one-shot call gives up its closure and its tag now; they leave with the DueCall.
            return DueCall(handle: handle, work: handle.work.take()!, deadline: deadline, now: now, tags: untag(handle))
        }
    }

    /// Sends a finished call on: the next run of a repeating call, or done. Mutex held.
    ///
    /// - Parameters:
    ///   - deadline: When the run was due.
    ///   - returned: When the call returned, read before taking the mutex, so that waiting for the
    ///     mutex cannot stretch a fixed delay.
    /// - Returns: The closure of a repeating call cancelled during this run, for the caller to
    ///   release once it has unlocked.
    func finishRun(
        of handle: TimerHandle, dueAt deadline: MonotonicInstant, returnedAt returned: MonotonicInstant
    ) -> (@Sendable () -> Void)? {
        state.running = nil
        guard handle.advance({ $0.finished(repeating: handle.isRepeating) }).to != nil else {
            return handle.work.take()  // cancelled while running (its tag went with the cancel)
        }
        guard let repetition = handle.repetition else { return nil }
        // A cancel from now on finds the call scheduled; its entry goes in under this same hold of
        // the mutex, so a sweep that cancel may start finds it there.
        let next = RepeatSchedule.nextDeadline(
            after: deadline, interval: repetition.interval, spacing: repetition.spacing, now: returned)
        state.heap.insert(handle, deadline: next)
        return nil
    }

    func _blockingWaitForCalls() {
        state.activity?.sleeping()
        wakeUp.wait(mutex)
        state.activity?.running("timer call")
    }

    func _blockingWaitForDeadline(_ deadline: MonotonicInstant) {
        state.activity?.sleeping(until: deadline)
        let timedOut = !wakeUp.wait(mutex, until: deadline)
        if timedOut { state.spinWindow.timedWaitEnded(deadline: deadline, woke: .now()) }
        state.activity?.running("timer call")
    }

    /// Watches the clock, unlocked, until `deadline`, a few microseconds away (see
    /// ``TimerSpinWindow``), yielding the core between looks. A call scheduled meanwhile for an
    /// earlier instant waits for the spin to end, at most the window. Mutex held on entry and exit.
    func spinUntil(_ deadline: MonotonicInstant) {
        state.activity?.spinning()
        mutex.unlock()
        _ = spinBriefly(for: MonotonicInstant.now().duration(to: deadline)) { MonotonicInstant.now() >= deadline }
        mutex.lock()
        state.activity?.running("timer call")
    }
}
