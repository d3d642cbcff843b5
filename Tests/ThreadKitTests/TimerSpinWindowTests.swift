import Foundation
import Testing
@testable import ThreadKit

private func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

/// Issue 23, item 3: the timer thread spins, rather than sleeps, for a deadline nearer than its
/// timed waits usually end late, learned by `TimerSpinWindow` from made-up wake times.
@Suite struct TimerSpinWindowTests {
    @Test("no spin before the first timed wait; then the window follows the average lateness")
    func learnsFromLateness() {
        var window = TimerSpinWindow()
        #expect(window.window == .zero)
        #expect(!window.spins(for: .nanoseconds(1)))
        #expect(window.spins(for: .zero))
        // Eight waits that each end 8 µs late: the average climbs toward 8 µs.
        for index in 0..<64 {
            let deadline = at(1_000_000 * UInt64(index + 1))
            window.timedWaitEnded(deadline: deadline, woke: deadline.advanced(by: .microseconds(8)))
        }
        #expect(window.window > .microseconds(7) && window.window <= .microseconds(8))
        #expect(window.spins(for: .microseconds(7)))
        #expect(!window.spins(for: .microseconds(9)))
    }

    @Test("a very late wake moves the window at most to its ceiling, and the window settles back")
    func spikesAreCapped() {
        var window = TimerSpinWindow()
        let deadline = at(5_000_000)
        for _ in 0..<32 { window.timedWaitEnded(deadline: deadline, woke: deadline.advanced(by: .microseconds(2))) }
        let settled = window.window
        // A wake 50 ms late (the thread was preempted) and one a day late (a suspended machine).
        window.timedWaitEnded(deadline: deadline, woke: deadline.advanced(by: .milliseconds(50)))
        #expect(window.window == TimerSpinWindow.ceiling)
        window.timedWaitEnded(deadline: deadline, woke: deadline.advanced(by: .seconds(86_400)))
        #expect(window.window == TimerSpinWindow.ceiling)
        for _ in 0..<200 { window.timedWaitEnded(deadline: deadline, woke: deadline.advanced(by: .microseconds(2))) }
        #expect(window.window <= settled + .microseconds(1))
    }

    @Test("a wake before the deadline (a timed wait ends no earlier) is not counted")
    func earlyWakesAreIgnored() {
        var window = TimerSpinWindow()
        window.timedWaitEnded(deadline: at(1_000), woke: at(999))
        #expect(window == TimerSpinWindow())
        window.timedWaitEnded(deadline: at(1_000), woke: at(1_000))
        #expect(window.window == .zero)
    }

    @Test("2,000 calls 10 µs apart, so the thread spins between many: none early, all in deadline order",
          .timeLimit(.minutes(1)))
    func callsCloseTogetherNeverRunEarly() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmSpin"))
        defer { timer.dispose() }
        let calls = 2_000
        let early = Counter()
        let order = Recorder<Int>()
        // Scheduled latest first, all before the first is due (half a second leaves room for a slow,
        // sanitized build), so the heap alone puts them in order.
        let start = ContinuousClock.now + .milliseconds(500)
        for index in (0..<calls).reversed() {
            let due = start + .microseconds(10 * index)
            try timer.schedule(at: due) {
                if ContinuousClock.now < due { early.increment() }
                order.append(index)
            }
        }
        #expect(ContinuousClock.now < start, "scheduling 2,000 calls took more than half a second")
        #expect(await eventually(timeout: .seconds(10)) { order.count == calls })
        #expect(early.value == 0)
        #expect(order.values == Array(0..<calls))
    }
}
