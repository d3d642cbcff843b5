import Testing
@testable import ThreadKit

/// Pure tests of when idle threads retire: made-up instants, no threads, no clock.
@Suite("CollectionSchedule")
struct CollectionScheduleTests {
    private func instant(_ nanoseconds: UInt64) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: nanoseconds)
    }

    /// The trivially correct model: walk the collector's ticks from the pool's creation until one
    /// finds the thread idle for `keepAlive`.
    private func modelRetirement(createdAt: UInt64, keepAlive: UInt64, interval: UInt64, idleSince: UInt64) -> UInt64 {
        var tick = createdAt + interval
        while tick < idleSince + keepAlive { tick += interval }
        return tick
    }

    @Test("The first tick is one interval after the pool's creation")
    func origin() {
        let schedule = CollectionSchedule(createdAt: instant(1_000), keepAlive: .nanoseconds(50), interval: .nanoseconds(30))
        #expect(schedule.origin == instant(1_030))
        #expect(schedule.keepAlive == .nanoseconds(50))
        #expect(schedule.interval == .nanoseconds(30))
    }

    @Test(
        "Retirement is the first tick at or after idleSince + keepAlive",
        arguments: [(50, 30), (0, 30), (30, 30), (60, 30), (29, 30), (31, 30), (1, 1), (0, 1), (7, 100), (250, 7)]
            as [(UInt64, UInt64)])
    func retirementMatchesModel(keepAlive: UInt64, interval: UInt64) {
        let createdAt: UInt64 = 1_000
        let schedule = CollectionSchedule(
            createdAt: instant(createdAt), keepAlive: .nanoseconds(keepAlive), interval: .nanoseconds(interval))
        for idleSince in createdAt...(createdAt + 700) {
            let retirement = schedule.retirement(idleSince: instant(idleSince)).nanoseconds
            let expected = modelRetirement(
                createdAt: createdAt, keepAlive: keepAlive, interval: interval, idleSince: idleSince)
            #expect(retirement == expected, "keepAlive \(keepAlive), interval \(interval), idle since \(idleSince)")
            // On the grid laid from creation, after creation, and never before the keep-alive is up.
            #expect(retirement > createdAt)
            #expect((retirement - createdAt) % interval == 0)
            #expect(retirement >= idleSince + keepAlive)
            #expect(retirement < max(idleSince + keepAlive, createdAt + interval) + interval)
        }
    }

    @Test("With the defaults: a 10 s keep-alive checked every 15 s")
    func defaultsInSeconds() {
        let second: UInt64 = 1_000_000_000
        let schedule = CollectionSchedule(createdAt: instant(5 * second), keepAlive: .seconds(10), interval: .seconds(15))
        // Ticks at 20 s, 35 s, 50 s…
        #expect(schedule.retirement(idleSince: instant(5 * second)) == instant(20 * second))
        #expect(schedule.retirement(idleSince: instant(6 * second)) == instant(20 * second))
        #expect(schedule.retirement(idleSince: instant(10 * second)) == instant(20 * second))
        #expect(schedule.retirement(idleSince: instant(10 * second + 1)) == instant(35 * second))
        #expect(schedule.retirement(idleSince: instant(25 * second)) == instant(35 * second))
        #expect(schedule.retirement(idleSince: instant(25 * second + 1)) == instant(50 * second))
    }

    @Test("The ticks do not depend on load: whatever else went idle, a thread retires on the same tick")
    func independentOfLoad() {
        let schedule = CollectionSchedule(createdAt: instant(0), keepAlive: .nanoseconds(100), interval: .nanoseconds(100))
        let quiet = schedule.retirement(idleSince: instant(1_234))
        // Steady load: another thread goes idle every 10 ns, over and over.
        var busy: [MonotonicInstant] = []
        for idleSince in stride(from: UInt64(0), through: 5_000, by: 10) {
            busy.append(schedule.retirement(idleSince: instant(idleSince)))
        }
        #expect(schedule.retirement(idleSince: instant(1_234)) == quiet)
        #expect(quiet == instant(1_400))
        // Threads idle since the same window of the grid retire together, on one tick.
        #expect(schedule.retirement(idleSince: instant(1_201)) == instant(1_400))
        #expect(schedule.retirement(idleSince: instant(1_300)) == instant(1_400))
        #expect(schedule.retirement(idleSince: instant(1_301)) == instant(1_500))
        // A later idle start never gives an earlier retirement.
        #expect(busy == busy.sorted())
    }

    @Test("keepAlive zero: a thread retires at the first tick at or after it went idle")
    func zeroKeepAlive() {
        let schedule = CollectionSchedule(createdAt: instant(1_000), keepAlive: .zero, interval: .nanoseconds(100))
        #expect(schedule.retirement(idleSince: instant(1_000)) == instant(1_100))
        #expect(schedule.retirement(idleSince: instant(1_099)) == instant(1_100))
        #expect(schedule.retirement(idleSince: instant(1_100)) == instant(1_100))
        #expect(schedule.retirement(idleSince: instant(1_101)) == instant(1_200))
        #expect(schedule.retirement(idleSince: instant(1_500)) == instant(1_500))
    }

    @Test("Idle before the first tick: the first tick, if the keep-alive is up by then")
    func beforeOrigin() {
        let schedule = CollectionSchedule(createdAt: instant(1_000), keepAlive: .nanoseconds(40), interval: .nanoseconds(100))
        #expect(schedule.retirement(idleSince: instant(0)) == instant(1_100))
        #expect(schedule.retirement(idleSince: instant(1_060)) == instant(1_100))
        #expect(schedule.retirement(idleSince: instant(1_061)) == instant(1_200))
    }

    @Test("Saturates at the end of the time line instead of overflowing")
    func saturation() {
        let schedule = CollectionSchedule(createdAt: instant(1_000), keepAlive: .seconds(1), interval: .nanoseconds(300))
        #expect(schedule.retirement(idleSince: instant(.max - 5)) == instant(.max))
        #expect(schedule.retirement(idleSince: instant(.max)) == instant(.max))

        let forever = CollectionSchedule(createdAt: instant(0), keepAlive: .seconds(Int64.max), interval: .seconds(15))
        let retirement = forever.retirement(idleSince: instant(1_000_000_000))
        #expect(retirement >= instant(1_000_000_000).advanced(by: .seconds(Int64.max)))

        let slow = CollectionSchedule(createdAt: instant(.max - 100), keepAlive: .zero, interval: .seconds(1))
        #expect(slow.origin == instant(.max))
        #expect(slow.retirement(idleSince: instant(5)) == instant(.max))
    }

    @Test("An interval below one nanosecond counts as one nanosecond")
    func subNanosecondInterval() {
        let tiny = Duration(secondsComponent: 0, attosecondsComponent: 1)
        let schedule = CollectionSchedule(createdAt: instant(100), keepAlive: .nanoseconds(10), interval: tiny)
        #expect(schedule.origin == instant(101))
        #expect(schedule.retirement(idleSince: instant(200)) == instant(210))
        #expect(schedule.retirement(idleSince: instant(0)) == instant(101))
    }
}
