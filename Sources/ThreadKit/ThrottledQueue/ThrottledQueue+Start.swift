#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension ThrottledQueue {
    /// How long after the earliest allowed instant a waiting task starts: measured once per
    /// process (see ``ReadingFloor``), between 1 and 25 µs.
    ///
    /// The queue records a task's start on the thread that runs it, right before the task's code
    /// begins, and counts the next gap from there; a task body that reads the clock in its first
    /// line reads it a call and a clock reading later. That distance varies by about what one
    /// reading of the clock costs here; aiming this much later keeps the bodies themselves from
    /// seeing two starts closer than the rules allow, in the ordinary case (not across a
    /// preemption between the two readings, which nothing can prevent). Every microsecond of it is
    /// a microsecond of every waiting task's lateness, so it is no more than the machine needs.
    /// (A task that arrives after its gap has passed by more than this starts at once.)
    static let startMargin = ReadingFloor.measuredMargin()

    /// The longest a thread watches the clock before a start, instead of sleeping.
    ///
    /// A thread woken by the kernel at a deadline runs tens of microseconds after it (more on a
    /// virtual machine); an API's rate limit counts from the request, so a thread sleeps until a
    /// little before the start and spends the rest yielding the core. At short intervals
    /// ``approachShare`` makes it shorter.
    static let finalApproach = Duration.microseconds(100)

    /// The share of the time between two starts that watching the clock may take: 1/20.
    ///
    /// With ``finalApproach`` it bounds the clock-watching to min(100 µs, 5 %) of the time from the
    /// previous start: at most 5 % of a core at any interval (1 % at 10 ms), where a fixed 100 µs
    /// cost 10 % at a 1 ms interval and all of a core at 100 µs. The price is precision at short
    /// intervals only: a start 1 ms after the last watches the clock for the last 50 µs.
    static let approachShare = 20

    /// One step toward a start allowed at `allowed`, as the schedule's
    /// ``ThrottleSchedule/approach(toStartAt:now:)`` says: sleeps on `condition` (which any change
    /// signals) or watches the clock, then returns `nil` for the caller to decide again; or, once it
    /// is time, returns the instant to start at. Every start, by the worker or by a `sync` caller,
    /// nested or not, is carried out by this one function. Mutex held.
    ///
    /// A coordinated queue then asks its coordinator too, once the local rules allow the start (see
    /// ThrottledQueue+Coordination).
    ///
    /// - Parameters:
    ///   - gap: The gap that follows a nested start; `nil` for the next queued task's own.
    ///   - activity: The worker's, which it reports sleeping while it sleeps; `nil` for a caller
    ///     reported blocked in its wait already.
    func _blockingApproach(
        toStartAt allowed: MonotonicInstant, on condition: MonotonicCondition, gap: Duration? = nil,
        reporting activity: ThreadActivity? = nil
    ) -> MonotonicInstant? {
        let now = MonotonicInstant.now()
        guard _blockingCarryOut(schedule.approach(toStartAt: allowed, now: now), on: condition, reporting: activity, now: now) else { return nil }
        if let coordination {
            return _blockingCoordinatedApproach(coordination, localAllowed: allowed, now: now, gap: gap, on: condition, reporting: activity)
        }
        return now
    }

    /// The shortest sleep toward a start that the worker reports as sleeping.
    static let reportedSleep = Duration.milliseconds(1)

    /// Carries out one step of an approach: sleeps on `condition` (`activity`, if given, reported
    /// sleeping until the wake when that is at least ``reportedSleep`` after `now`) or watches the
    /// clock, and returns `false`; or, when it is time, returns `true`. Mutex held.
    func _blockingCarryOut(
        _ approach: ThrottleSchedule<Item>.Approach, on condition: MonotonicCondition, reporting activity: ThreadActivity? = nil,
        now: MonotonicInstant? = nil
    ) -> Bool {
        switch approach {
        case .startNow:
            return true
        case .sleep(let wake):
            // A shorter sleep is shown as running: two state writes would be a visible share of a
            // 100 µs gap's CPU, and a dump could hardly catch it anyway.
            let shown = now.map { $0.advanced(by: Self.reportedSleep) <= wake } == true ? activity : nil
            shown?.sleeping(until: wake)
            condition.wait(mutex, until: wake)
            shown?.running("task")
        case .spin(let target):
            mutex.unlock()
            Self.spin(until: target)
            mutex.lock()
        }
        return false
    }

    /// Yields the core until `deadline`, which is at most ``finalApproach`` away: a spin, not a
    /// blocking wait. Mutex not held.
    private static func spin(until deadline: MonotonicInstant) {
        while MonotonicInstant.now() < deadline { sched_yield() }
    }
}
