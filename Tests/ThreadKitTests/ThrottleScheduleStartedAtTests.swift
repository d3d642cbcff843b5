import Testing
@testable import ThreadKit

/// `ThrottleSchedule.end(at:startedAt:)`: gaps count from when a task's own code began.
@Suite struct ThrottleScheduleStartedAtTests {
    typealias Schedule = ThrottleSchedule<Int>

    func at(_ microseconds: Int) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: 1_000_000_000_000).advanced(by: .microseconds(microseconds))
    }

    @Test("a later actual start moves the next gap, for both monitors' start-based rule")
    func laterStartMovesTheGap() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        #expect(schedule.start(at: at(0)) == 1)
        schedule.end(at: at(1_000), startedAt: at(7))
        #expect(schedule.nextStart() == .startAt(at(10_007)))
    }

    @Test("an actual start never moves a start earlier than it was granted")
    func neverEarlier() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(50))
        schedule.end(at: at(1_000), startedAt: at(20))
        #expect(schedule.nextStart() == .startAt(at(10_050)))
    }

    @Test("the rate limit's window counts from the actual start too")
    func rateLimitUsesTheActualStart() {
        var schedule = Schedule(interval: .zero, monitor: .concurrent, mutability: .all, limit: .rate(2, per: .milliseconds(100)))
        for item in 1...3 { schedule.submit(item) }
        _ = schedule.start(at: at(0))
        schedule.end(at: at(10), startedAt: at(3))
        _ = schedule.start(at: at(10))
        schedule.end(at: at(20), startedAt: at(12))
        #expect(schedule.nextStart() == .startAt(at(100_003)))
    }

    @Test("an outer task's end does not move a nested task's start, and a nested end moves its own")
    func nestedStartsKeepTheirOwnInstants() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(0))
        schedule.startNested(at: at(10_000), gap: nil)
        schedule.end(at: at(10_500), startedAt: at(10_002))  // the nested task
        schedule.end(at: at(11_000), startedAt: at(1))       // the outer task: `last` is the nested one
        #expect(schedule.nextStart() == .startAt(at(20_002)))
    }

    @Test("RingBuffer.last and replaceLast(with:) work across wrap-around")
    func ringBufferLast() {
        var buffer = RingBuffer<Int>(minimumCapacity: 4)
        #expect(buffer.last == nil)
        for value in 1...3 { buffer.append(value) }
        _ = buffer.popFirst()
        _ = buffer.popFirst()
        buffer.append(4)
        buffer.append(5)  // wraps around the 4-slot storage
        #expect(buffer.last == 5)
        buffer.replaceLast(with: 50)
        #expect(buffer.removeAll() == [3, 4, 50])
    }
}
