import Foundation
import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a message that names the argument and the value.
///
/// Each body runs in a child process; its standard error is checked for the precondition's message.
@Suite("ThrottledQueue preconditions")
struct ThrottledQueueExitTests {
    @Test("A negative interval in init stops", .exitTestOnOwnThreads)
    func negativeIntervalInInit() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThrottledQueue(label: "TQ exit init", interval: .milliseconds(-1))
        }
        #expect(stopped(result, saying: "ThrottledQueue 'TQ exit init'.init: interval must not be negative, got -0.001 seconds"))
    }

    @Test("A negative interval set on a queue stops", .exitTestOnOwnThreads)
    func negativeIntervalSetter() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit setter", interval: .milliseconds(10))
            queue.interval = .milliseconds(-5)
        }
        #expect(stopped(result, saying: "ThrottledQueue 'TQ exit setter'.interval: interval must not be negative, got -0.005 seconds"))
    }

    @Test("A negative async(interval:) stops", .exitTestOnOwnThreads)
    func negativeAsyncInterval() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit async", interval: .milliseconds(10))
            try? queue.async(interval: .seconds(-2)) {}
        }
        #expect(stopped(result, saying: "ThrottledQueue 'TQ exit async'.async(interval:_:): interval must not be negative, got -2.0 seconds"))
    }

    @Test("A negative sync(interval:) stops", .exitTestOnOwnThreads)
    func negativeSyncInterval() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit sync", interval: .milliseconds(10))
            synchronously { queue.sync(interval: .milliseconds(-3)) {} }
        }
        #expect(stopped(result, saying: "ThrottledQueue 'TQ exit sync'.sync(interval:_:): interval must not be negative, got -0.003 seconds"))
    }

    /// In a child process: exits with `code` unless `sync` on `queue`, called now, starts within
    /// `bound` and (if given) not before `notBefore`.
    static func expectSyncStart(on queue: ThrottledQueue, notBefore: ContinuousClock.Instant? = nil,
                                within bound: Duration, orExit code: Int32) {
        let called = ContinuousClock.now
        let started = queue.sync { ContinuousClock.now }
        if let notBefore, started < notBefore { exit(code) }
        if started - (notBefore ?? called) >= bound { exit(code + 1) }
    }

    @Test("pause(for:) with a negative duration, and pause(until:) with an instant already past, mean no pause", .exitTestOnOwnThreads)
    func pauseInThePastIsNoPause() async {
        await #expect(processExitsWith: .success) {
            let queue = ThrottledQueue(label: "TQ past pause", interval: .zero)
            queue.pause(for: .milliseconds(-1))
            Self.expectSyncStart(on: queue, within: .milliseconds(250), orExit: 3)
            queue.pause(for: .seconds(-3_600))
            queue.pause(until: .now - .seconds(5))
            queue.pause(for: .zero)
            Self.expectSyncStart(on: queue, within: .milliseconds(250), orExit: 5)
        }
    }

    @Test("pause(for:) with a negative duration, or pause(until:) with an instant already past, never shortens a pause in force", .exitTestOnOwnThreads)
    func pauseInThePastKeepsAPauseInForce() async {
        await #expect(processExitsWith: .success) {
            let queue = ThrottledQueue(label: "TQ past pause kept", interval: .zero)
            let paused = ContinuousClock.now
            queue.pause(for: .milliseconds(300))
            queue.pause(for: .milliseconds(-500))
            queue.pause(until: .now - .seconds(1))
            Self.expectSyncStart(on: queue, notBefore: paused + .milliseconds(300), within: .milliseconds(250), orExit: 3)
        }
    }

    @Test("RateLimit.rate(0, per:) stops", .exitTestOnOwnThreads)
    func rateLimitOfZero() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = RateLimit.rate(0, per: .seconds(1))
        }
        #expect(stopped(result, saying: "RateLimit.rate(_:per:): count must be at least 1, got 0"))
    }

    @Test("RateLimit.rate(1, per: .zero) stops", .exitTestOnOwnThreads)
    func rateLimitWithZeroWindow() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = RateLimit.rate(1, per: .zero)
        }
        #expect(stopped(result, saying: "RateLimit.rate(_:per:): window must be more than zero, got 0.0 seconds"))
    }

    @Test("waitUntilIdle() from inside the queue's own task stops instead of waiting forever", .exitTestOnOwnThreads)
    func waitUntilIdleFromOwnTask() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit wait", interval: .zero)
            try? queue.async { queue.waitUntilIdle() }
            synchronously { queue.waitUntilIdle() }
        }
        #expect(stopped(result, saying: "TQ exit wait", "waitUntilIdle() from inside its own task"))
    }

    @Test("waitUntilIdle() from inside a sync on the queue stops too", .exitTestOnOwnThreads)
    func waitUntilIdleFromOwnSync() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit wait sync", interval: .zero)
            synchronously { queue.sync { queue.waitUntilIdle() } }
        }
        #expect(stopped(result, saying: "waitUntilIdle() from inside its own task"))
    }

    @Test("ThrottleSchedule.start(at:) before the allowed instant stops", .exitTestOnOwnThreads)
    func scheduleStartBeforeItsTime() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var schedule = ThrottleSchedule<Int>(interval: .seconds(1), monitor: .concurrent, mutability: .all, limit: nil)
            schedule.submit(1)
            schedule.submit(2)
            _ = schedule.start(at: MonotonicInstant(nanoseconds: 1_000_000_000))
            schedule.end(at: MonotonicInstant(nanoseconds: 1_000_000_000))
            _ = schedule.start(at: MonotonicInstant(nanoseconds: 1_500_000_000))
        }
        #expect(stopped(result, saying: "before its time"))
    }
}
