extension ThrottledQueue {
    /// A coordinated queue's coordinator and its side of the starts.
    ///
    /// Every start goes through `_blockingApproach(toStartAt:on:gap:)` (the worker's, a `sync`
    /// caller's, a nested one), which, once the local rules allow the start, hands it to
    /// ``_blockingCoordinatedApproach(_:localAllowed:now:gap:on:)``: the queue asks the coordinator,
    /// with its mutex let go, and waits out the reservation with the same timed wait and final
    /// approach as a local start, so cancelling, pausing or changing the interval still wakes it.
    /// Every end reports a `.serial` lease back before the queue records the end, so this process
    /// never asks for its next start while its own lease still stands.
    final class SharedStarts: @unchecked Sendable {
        // Sendable: `starts` is guarded by the queue's mutex; `coordinator` is constant.
        let coordinator: any StartCoordinator
        var starts: CoordinatedStarts

        init(coordinator: any StartCoordinator, policy: UnavailablePolicy) {
            self.coordinator = coordinator
            self.starts = CoordinatedStarts(policy: policy)
        }
    }

    /// One step toward a start that the local rules allow from `localAllowed` (at `now`, not before
    /// it), as the coordination decides: asks the coordinator, waits for its answer or for the time
    /// it gave, then returns `nil` for the caller to decide again; or, once the reservation's time
    /// has come, records the start in the coordination and returns its instant. Mutex held.
    func _blockingCoordinatedApproach(
        _ coordination: SharedStarts, localAllowed: MonotonicInstant, now: MonotonicInstant,
        gap: Duration?, on condition: MonotonicCondition, reporting activity: ThreadActivity? = nil
    ) -> MonotonicInstant? {
        let step = coordination.starts.step(
            localAllowed: localAllowed, now: now, nested: schedule.running > 0,
            gap: gap ?? schedule.nextGap ?? schedule.interval, monitor: monitor, limit: limit)
        switch step {
        case .startAt(let at):
            let now = MonotonicInstant.now()
            guard _blockingCarryOut(schedule.approach(toStartAt: at, now: now), on: condition, reporting: activity, now: now) else { return nil }
            coordination.starts.started()
            return now
        case .awaitAnswer:
            activity?.sleeping()
            condition.wait(mutex)
            activity?.running("task")
        case .wait(let until):
            activity?.sleeping(until: until)
            condition.wait(mutex, until: until)
            activity?.running("task")
        case .release(let token):
            mutex.unlock()
            coordination.coordinator.finished(token: token)
            mutex.lock()
        case .ask(let request):
            mutex.unlock()
            let answer = coordination.coordinator.reserve(request)
            mutex.lock()
            let availability = coordination.starts.answered(answer, now: .now())
            // The other threads that wait for this answer (or sleep toward a start) decide again.
            changed.signal()
            wakeWaiters()
            if availability != .unchanged {
                mutex.unlock()
                logAvailability(availability, policy: coordination.starts.policy)
                mutex.lock()
            }
        }
        return nil
    }

    /// Hands a `.serial` lease back to the coordinator when the innermost running task ended at
    /// `now`, before the end is recorded (and a reservation nested in that task, once no task
    /// runs). Mutex not held.
    func reportEnd(to coordination: SharedStarts, at now: MonotonicInstant) {
        for token in mutex.withLock({ coordination.starts.ended(now: now) }) {
            coordination.coordinator.finished(token: token)
        }
    }

    /// Gives up the reservation left unused once the queue is idle (nothing queued, nothing
    /// running): its lease, held meanwhile, would stall every process until it expires. Mutex
    /// held; the lease returned is handed back with ``handBack(_:)`` after it.
    func _takeUnusedReservation() -> UInt64? {
        guard let coordination, schedule.isIdle else { return nil }
        return coordination.starts.giveUpReservation(now: .now())
    }

    /// Hands `lease` (from ``_takeUnusedReservation()``) back to the coordinator. Mutex not held.
    func handBack(_ lease: UInt64?) {
        if let lease { coordination?.coordinator.finished(token: lease) }
    }

    private func logAvailability(_ availability: CoordinatedStarts.Availability, policy: UnavailablePolicy) {
        switch availability {
        case .lost(let reason):
            let what = switch policy {
            case .localFallback(let share): "the local throttle at \(share) of the rate decides"
            case .failClosed: "nothing starts until it answers again"
            case .failOpen: "the queue's own rules decide"
            }
            Log.log(.throttle, "\(label): the coordinator cannot decide (\(reason)); \(what)")
        case .regained:
            Log.log(.throttle, "\(label): the coordinator answers again")
        case .unchanged:
            break
        }
    }
}
