import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitURL
import SeededRandom

/// The per-endpoint slot state machine, driven with made-up times: no threads, sockets or clocks.
@Suite struct EndpointSlotsTests {
    typealias Slots = EndpointSlots<Int>

    func ms(_ value: Int) -> Duration { .milliseconds(value) }

    func started(_ admission: Slots.Admission) -> [Int] {
        guard case .accepted(let decision) = admission else { return [] }
        return decision.start
    }

    func released(_ ending: Slots.Ending?) -> Slots.Decision? {
        guard case .released(let decision)? = ending else { return nil }
        return decision
    }

    @Test func startsAtOnceWhileSlotsAreFreeThenQueuesInOrder() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil)
        #expect(started(slots.submit(1, kind: .short, now: .zero)) == [1])
        #expect(started(slots.submit(2, kind: .short, now: .zero)) == [2])
        #expect(started(slots.submit(3, kind: .short, now: .zero)) == [])
        #expect(started(slots.submit(4, kind: .short, now: .zero)) == [])
        #expect(slots.counts == .init(running: 2, runningLong: 0, queued: 2))
        #expect(released(slots.end(2, outcome: .completed, now: ms(5)))?.start == [3])
        #expect(released(slots.end(1, outcome: .failed, now: ms(6)))?.start == [4])
        #expect(released(slots.end(3, outcome: .timedOut, now: ms(7)))?.start == [])
        #expect(released(slots.end(4, outcome: .completed, now: ms(8)))?.start == [])
        #expect(slots.counts == .init(running: 0, runningLong: 0, queued: 0, completed: 2, failed: 1, timedOut: 1))
        #expect(slots.isIdle)
    }

    @Test func aSecondEndIsIgnoredSoASlotComesBackOnce() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.submit(2, kind: .short, now: .zero)
        _ = slots.submit(3, kind: .short, now: .zero)
        #expect(released(slots.end(1, outcome: .timedOut, now: ms(1)))?.start == [2])
        #expect(slots.end(1, outcome: .completed, now: ms(2)) == nil)
        #expect(slots.end(1, outcome: .failed, now: ms(2)) == nil)
        #expect(slots.counts == .init(running: 1, runningLong: 0, queued: 1, completed: 0, failed: 0, timedOut: 1))
        #expect(slots.end(99, outcome: .failed, now: ms(2)) == nil)
    }

    @Test func aQueuedRequestLeavesTheQueueAtOnce() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.submit(2, kind: .short, now: .zero)
        _ = slots.submit(3, kind: .short, now: .zero)
        #expect(slots.end(2, outcome: .failed, now: ms(1)) == .dequeued)
        #expect(!slots.isQueued(2))
        #expect(slots.counts.queued == 1)
        #expect(released(slots.end(1, outcome: .completed, now: ms(2)))?.start == [3])
        #expect(slots.end(2, outcome: .failed, now: ms(3)) == nil)
    }

    @Test func longRequestsNeverExceedTheirLimitAndShortOnesKeepASlot() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 2, rate: nil)
        #expect(started(slots.submit(1, kind: .long(waits: false), now: .zero)) == [1])
        #expect(started(slots.submit(2, kind: .long(waits: false), now: .zero)) == [2])
        #expect(!slots.isLongRequestAllowed)
        #expect(slots.submit(3, kind: .long(waits: false), now: .zero) == .rejected(limit: 2))
        #expect(started(slots.submit(4, kind: .long(waits: true), now: .zero)) == [])
        #expect(started(slots.submit(5, kind: .short, now: .zero)) == [5])
        #expect(slots.counts == .init(running: 3, runningLong: 2, queued: 1, failed: 1))
        // The short slot frees: the waiting long request must not take it.
        #expect(released(slots.end(5, outcome: .completed, now: ms(1)))?.start == [])
        #expect(released(slots.end(1, outcome: .completed, now: ms(2)))?.start == [4])
        #expect(slots.counts.runningLong == 2)
    }

    @Test func aWaitingLongRequestLetsShortOnesBehindItPassAndKeepsItsPlace() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil)
        _ = slots.submit(1, kind: .long(waits: true), now: .zero)
        _ = slots.submit(2, kind: .short, now: .zero)
        _ = slots.submit(3, kind: .long(waits: true), now: .zero)
        _ = slots.submit(4, kind: .short, now: .zero)
        _ = slots.submit(5, kind: .short, now: .zero)
        // 2 ends: 3 must wait for a long slot, 4 passes it.
        #expect(released(slots.end(2, outcome: .completed, now: ms(1)))?.start == [4])
        // 1 ends: 3 is first in line again and takes the slot before 5.
        #expect(released(slots.end(1, outcome: .completed, now: ms(2)))?.start == [3])
        #expect(released(slots.end(4, outcome: .completed, now: ms(3)))?.start == [5])
    }

    @Test func zeroLongRequestsAllowsNoLongRequestWhetherItWaitsOrNot() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        #expect(!slots.isLongRequestAllowed)
        #expect(slots.submit(1, kind: .long(waits: false), now: .zero) == .rejected(limit: 0))
        #expect(slots.submit(2, kind: .long(waits: true), now: .zero) == .rejected(limit: 0))
        #expect(started(slots.submit(3, kind: .short, now: .zero)) == [3])
        #expect(slots.counts.failed == 2)
    }

    @Test func queuedWaitingLongRequestsCountAgainstTheLongLimitForRejection() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil)
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.submit(2, kind: .short, now: .zero)
        #expect(started(slots.submit(3, kind: .long(waits: false), now: .zero)) == [])
        #expect(!slots.isLongRequestAllowed)
        #expect(slots.submit(4, kind: .long(waits: false), now: .zero) == .rejected(limit: 1))
        #expect(slots.end(3, outcome: .failed, now: ms(1)) == .dequeued)
        #expect(slots.isLongRequestAllowed)
    }

    @Test func rateLimitDelaysStartsAndAsksForOneWakeUp() {
        var slots = Slots(maxRequests: 10, maxLongRequests: 1, rate: .rate(2, per: .seconds(1)))
        #expect(started(slots.submit(1, kind: .short, now: .zero)) == [1])
        #expect(started(slots.submit(2, kind: .short, now: ms(100))) == [2])
        guard case .accepted(let third) = slots.submit(3, kind: .short, now: ms(200)) else {
            Issue.record("request 3 was refused")
            return
        }
        #expect(third.start == [])
        #expect(third.wakeAt == ms(1000))
        // A second waiter needs no second wake-up.
        guard case .accepted(let fourth) = slots.submit(4, kind: .short, now: ms(300)) else {
            Issue.record("request 4 was refused")
            return
        }
        #expect(fourth == Slots.Decision(start: [], wakeAt: nil))
        // An early (stale) wake-up starts nothing.
        #expect(slots.wake(now: ms(999)).start == [])
        let due = slots.wake(now: ms(1000))
        #expect(due.start == [3])
        #expect(due.wakeAt == ms(1100))
        #expect(slots.wake(now: ms(1100)).start == [4])
        #expect(slots.counts.running == 4)
    }

    @Test func aPauseHoldsStartsUntilItEnds() {
        var slots = Slots(maxRequests: 4, maxLongRequests: 1, rate: nil)
        _ = slots.submit(1, kind: .short, now: .zero)
        #expect(slots.pause(until: ms(1000), now: ms(10)) == Slots.Decision())
        #expect(slots.pausedUntil == ms(1000))
        guard case .accepted(let held) = slots.submit(2, kind: .short, now: ms(20)) else {
            Issue.record("request 2 was refused")
            return
        }
        #expect(held == Slots.Decision(start: [], wakeAt: ms(1000)))
        // An ending frees a slot but the pause still holds.
        #expect(released(slots.end(1, outcome: .completed, now: ms(30))) == Slots.Decision())
        // A shorter pause does not cut the longer one short.
        _ = slots.pause(until: ms(500), now: ms(40))
        #expect(slots.pausedUntil == ms(1000))
        #expect(slots.wake(now: ms(1000)).start == [2])
        #expect(started(slots.submit(3, kind: .short, now: ms(1001))) == [3])
    }

    @Test func aLongerPauseArmsALaterWakeUpOnceTheEarlierOneCame() {
        var slots = Slots(maxRequests: 4, maxLongRequests: 1, rate: nil)
        _ = slots.pause(until: ms(100), now: .zero)
        guard case .accepted(let held) = slots.submit(1, kind: .short, now: .zero) else {
            Issue.record("request 1 was refused")
            return
        }
        #expect(held.wakeAt == ms(100))
        #expect(slots.pause(until: ms(700), now: ms(50)).wakeAt == nil)
        #expect(slots.wake(now: ms(100)) == Slots.Decision(start: [], wakeAt: ms(700)))
        #expect(slots.wake(now: ms(700)).start == [1])
    }

    @Test func raisingTheLimitsStartsWaitersAtOnce() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.submit(2, kind: .short, now: .zero)
        _ = slots.submit(3, kind: .short, now: .zero)
        #expect(slots.setLimits(maxRequests: 3, maxLongRequests: 1, rate: nil, now: ms(1)).start == [2, 3])
        // Lowered below what runs: nothing new starts until the count is under the new limit.
        #expect(slots.setLimits(maxRequests: 2, maxLongRequests: 1, rate: nil, now: ms(2)).start == [])
        _ = slots.submit(4, kind: .short, now: ms(3))
        #expect(released(slots.end(1, outcome: .completed, now: ms(4)))?.start == [])
        #expect(released(slots.end(2, outcome: .completed, now: ms(5)))?.start == [4])
    }

    @Test func disposingEmptiesTheQueueInOrderAndCountsThemFailed() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.submit(2, kind: .short, now: .zero)
        _ = slots.submit(3, kind: .short, now: .zero)
        #expect(slots.removeAllQueued() == [2, 3])
        #expect(slots.counts == .init(running: 1, runningLong: 0, queued: 0, failed: 2))
        #expect(released(slots.end(1, outcome: .failed, now: ms(1)))?.start == [])
        #expect(slots.isIdle)
    }

    @Test func aRequestEndedBeforeItsSubmissionCountsAsFailed() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        slots.countUnsubmittedFailure()
        #expect(slots.counts == .init(running: 0, runningLong: 0, queued: 0, failed: 1))
        #expect(slots.isIdle)
    }

    @Test func manyRequestsLeavingTheQueueKeepItsOrder() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(0, kind: .short, now: .zero)
        for id in 1...500 { _ = slots.submit(id, kind: .short, now: .zero) }
        for id in stride(from: 1, through: 500, by: 2) { #expect(slots.end(id, outcome: .failed, now: .zero) == .dequeued) }
        var order: [Int] = []
        var current = 0
        while let next = released(slots.end(current, outcome: .completed, now: .zero))?.start.first {
            order.append(next)
            current = next
        }
        #expect(order == Array(stride(from: 2, through: 500, by: 2)))
        #expect(slots.counts == .init(running: 0, runningLong: 0, queued: 0, completed: 251, failed: 250))
    }

    @Test func aWaitingRequestAtTheFrontKeepsTheStorageBoundedWhileManyPassIt() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil)
        #expect(started(slots.submit(0, kind: .long(waits: true), now: .zero)) == [0])
        #expect(started(slots.submit(1, kind: .long(waits: true), now: .zero)) == [])   // waits for the long slot
        var largest = 0
        for id in 2..<40_002 {
            #expect(started(slots.submit(id, kind: .short, now: .zero)) == [id])
            largest = max(largest, slots.storedPlaces)
            #expect(released(slots.end(id, outcome: .completed, now: .zero))?.start == [])
        }
        #expect(largest <= 2 * Slots.holeAllowance + 2, "the queue stored \(largest) places for one waiting request")
        #expect(slots.isQueued(1))
        #expect(slots.counts == .init(running: 1, runningLong: 1, queued: 1, completed: 40_000))
        // The waiter still has its place and starts when the long slot is free.
        #expect(released(slots.end(0, outcome: .completed, now: .zero))?.start == [1])
        #expect(slots.storedPlaces == 0)
    }

    @Test func requestsLeavingTheQueueBehindAWaiterKeepTheStorageBounded() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(0, kind: .short, now: .zero)   // holds the only slot
        _ = slots.submit(1, kind: .short, now: .zero)   // waits at the front
        var largest = 0
        for id in 2..<40_002 {
            #expect(started(slots.submit(id, kind: .short, now: .zero)) == [])
            largest = max(largest, slots.storedPlaces)
            #expect(slots.end(id, outcome: .failed, now: .zero) == .dequeued)
        }
        #expect(largest <= 2 * Slots.holeAllowance + 2, "the queue stored \(largest) places for one waiting request")
        #expect(slots.counts == .init(running: 1, runningLong: 0, queued: 1, failed: 40_000))
        #expect(released(slots.end(0, outcome: .completed, now: .zero))?.start == [1])
    }

    @Test func compactionKeepsTheOrderOfManyWaiters() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        _ = slots.submit(0, kind: .short, now: .zero)
        // 1,000 waiters; every third leaves, in an order that leaves holes everywhere.
        for id in 1...1_000 { _ = slots.submit(id, kind: .short, now: .zero) }
        let leaving = Array(stride(from: 3, through: 1_000, by: 3)).reversed()
        for id in leaving { #expect(slots.end(id, outcome: .failed, now: .zero) == .dequeued) }
        #expect(slots.storedPlaces <= 2 * slots.counts.queued + Slots.holeAllowance + 1)
        var order: [Int] = []
        var current = 0
        while let next = released(slots.end(current, outcome: .completed, now: .zero))?.start.first {
            order.append(next)
            current = next
            _ = slots.submit(10_000 + next, kind: .short, now: .zero)   // new arrivals go to the back
            #expect(slots.end(10_000 + next, outcome: .failed, now: .zero) == .dequeued)
        }
        #expect(order == (1...1_000).filter { $0 % 3 != 0 })
    }

    /// Random events against a trivially correct model: a list of waiters scanned from the front.
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8])
    func randomEventsAgreeWithAModel(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let maxRequests = Int(random.next() % 4) + 1
        let maxLong = Int(random.next() % UInt64(maxRequests))
        var slots = Slots(maxRequests: maxRequests, maxLongRequests: maxLong, rate: nil)
        var modelQueue: [(id: Int, long: Bool)] = []
        var modelRunning: [Int: Bool] = [:]
        var ended = 0
        var rejected = 0
        func modelGrant() -> [Int] {
            var started: [Int] = []
            var index = 0
            while index < modelQueue.count, modelRunning.count < maxRequests {
                let waiter = modelQueue[index]
                if waiter.long, modelRunning.values.filter({ $0 }).count >= maxLong {
                    index += 1
                    continue
                }
                modelQueue.remove(at: index)
                modelRunning[waiter.id] = waiter.long
                started.append(waiter.id)
            }
            return started
        }
        for id in 0..<2_000 {
            if random.next() % 2 == 0 {
                let choice = random.next() % 4
                let kind: Slots.Kind = choice == 0 ? .long(waits: false) : choice == 1 ? .long(waits: true) : .short
                let admission = slots.submit(id, kind: kind, now: .zero)
                let runningLong = modelRunning.values.filter { $0 }.count
                let queuedLong = modelQueue.filter(\.long).count
                let refuse = kind == .long(waits: false) ? runningLong + queuedLong >= maxLong : (kind.isLong && maxLong == 0)
                if refuse {
                    #expect(admission == .rejected(limit: maxLong))
                    rejected += 1
                } else {
                    modelQueue.append((id, kind.isLong))
                    #expect(admission == .accepted(Slots.Decision(start: modelGrant())))
                }
            } else {
                let known = Array(modelRunning.keys) + modelQueue.map(\.id)
                guard !known.isEmpty else { continue }
                let victim = known[Int(random.next() % UInt64(known.count))]
                let ending = slots.end(victim, outcome: .completed, now: .zero)
                ended += 1
                if modelRunning.removeValue(forKey: victim) != nil {
                    #expect(ending == .released(Slots.Decision(start: modelGrant())))
                } else {
                    modelQueue.removeAll { $0.id == victim }
                    #expect(ending == .dequeued)
                }
            }
            #expect(slots.counts.running == modelRunning.count)
            #expect(slots.counts.runningLong == modelRunning.values.filter { $0 }.count)
            #expect(slots.counts.queued == modelQueue.count)
            #expect(slots.counts.running <= maxRequests)
            #expect(slots.counts.runningLong <= maxLong)
        }
        #expect(slots.counts.completed == ended)
        #expect(slots.counts.failed == rejected)
    }
}

