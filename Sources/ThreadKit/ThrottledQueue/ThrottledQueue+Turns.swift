extension ThrottledQueue {
    /// A `sync` caller's place in the queue, and the condition it sleeps on until it is next.
    ///
    /// One condition per caller, signalled only for the caller that is next: a queue with many
    /// `sync` callers does not wake them all at each end, to compete for the cores while the next
    /// one starts its work.
    final class Turn: Sendable {
        let isNext = MonotonicCondition()
    }

    /// Runs a `sync` caller's work on its own thread once its turn has come: its own turn in the
    /// queue, or, called from inside this queue's running task, a nested turn ahead of the queue.
    func runHere<T>(gap: Duration?, _ work: () throws -> T) rethrows -> T {
        let threadHold = Hold.ofThread, taskHold = Hold.ofTask
        mutex.lock()
        let context = SerialContext(.throttled(self))
        // Nested in this queue's running task, which waits for it: run by this thread or task, or
        // by a thread blocked waiting for this one (through a dedicated thread, a
        // DispatchMethod.sync, …), which handed its hold on.
        let holder = held(thread: threadHold, task: taskHold) ?? ExecutionContexts.heldHold(of: self)
        if let holder {
            // It starts ahead of the queue, its gap counted from the running task's own code, in
            // the holder's nested turn: the child tasks of `run`'s work, and the threads they wait
            // for, take it one at a time.
            schedule.began(at: holder.startedAt)
            _blockingWaitForNestedStart(in: holder, gap: gap)
        } else if ExecutionContexts.holds(context) {
            // Held without a known task (not reached: every hold of a queue carries its task).
            _blockingWaitForNestedStart(in: nil, gap: gap)
        } else {
            if let message = starvedPoolMessage(for: "sync", threadHold: threadHold) {
                mutex.unlock()
                preconditionFailure(message)
            }
            let turn = Turn()
            schedule.submit(.sync(turn), gap: gap)
            ExecutionContexts.blocking(for: context) { _blockingWaitForTurn(turn) }
            syncRunner = ThreadActivity.current
        }
        mutex.unlock()
        let hold = Hold(queue: self, pool: nil, outer: threadHold, nestedIn: holder)
        defer { endTask(startedAt: hold.startedAt, ticket: nil, nestedIn: holder, endsSyncTurn: holder == nil) }
        return try Hold.withThreadHold(hold) { try work() }
    }

    /// Waits until `turn` is next and its start is allowed, then starts it: a `sync` caller
    /// waits out its own turn, the way the worker would. Mutex held.
    private func _blockingWaitForTurn(_ turn: Turn) {
        while true {
            guard case .sync(let next)? = schedule.next, next === turn,
                  case .startAt(let allowed) = schedule.nextStart() else {
                turn.isNext.wait(mutex)
                continue
            }
            if let now = _blockingApproach(toStartAt: allowed, on: turn.isNext) {
                _ = schedule.start(at: now)
                return
            }
        }
    }

    /// Waits until a task nested in the running one may start, then starts it: after its gap, and
    /// once no other task nested in `holder` runs (concurrent child tasks of `run`'s work each get
    /// the queue to themselves, one after another). Mutex held.
    private func _blockingWaitForNestedStart(in holder: Hold?, gap: Duration?) {
        while true {
            if let holder, holder.hasNestedTaskRunning {
                // A sibling's nested task runs: a wait for the holder's nested turn, which that
                // sibling's thread (or task) holds, and which may close a cycle through what that
                // sibling waits for. Not for the queue: the holder's family holds that, the callers
                // blocked waiting for this thread included.
                ExecutionContexts.blocking(for: SerialContext(.nestedTurn(holder)), kind: "turn") { progress.wait(mutex) }
                continue
            }
            if let now = _blockingApproach(toStartAt: schedule.nestedStart(), on: progress, gap: gap ?? schedule.interval),
               holder?.hasNestedTaskRunning != true {
                schedule.startNested(at: now, gap: gap)
                holder?.hasNestedTaskRunning = true
                return
            }
        }
    }

    /// Records the end of a task that a caller ran itself (a `sync` caller, or `run`'s work), at
    /// once; a task nested in `holder` lets the next one nested in it start. `endsSyncTurn`: the
    /// task was a `sync` caller's own turn, whose thread ``Diagnostics`` showed running it.
    func endTask(startedAt: MonotonicInstant, ticket: Ticket?, nestedIn holder: Hold? = nil, endsSyncTurn: Bool = false) {
        let now = MonotonicInstant.now()
        if let coordination { reportEnd(to: coordination, at: now) }
        let (idle, unused) = mutex.withLock {
            schedule.end(at: now, startedAt: startedAt)
            if endsSyncTurn { syncRunner = nil }
            (holder ?? ticket?.nestedIn)?.hasNestedTaskRunning = false
            ticket?.nestedIn = nil
            ticket?.phase = .ended
            changed.signal()
            wakeWaiters()
            return (takeIdleWaiters(), _takeUnusedReservation())
        }
        handBack(unused)
        idle.resumeWaiters()
    }
}
