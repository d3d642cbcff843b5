import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitURL

/// The per-endpoint slots shared by a fleet: the lease asks, answers and releases, driven with
/// made-up times and made-up answers (no threads, no Redis).
@Suite("EndpointSlots with shared leases: asks, answers, releases and fallbacks")
struct EndpointSlotsLeaseTests {
    typealias Slots = EndpointSlots<Int>

    func ms(_ value: Int) -> Duration { .milliseconds(value) }
    func lease(_ token: String) -> EndpointLease { EndpointLease(endpoint: "http://api.example.com:80", token: token) }

    /// Two coordinators, known to the slots by identity only.
    final class Coordinator: Sendable {}
    static let first = Coordinator()
    static let second = Coordinator()

    /// Sharing through `coordinator` (the first one unless told) with `fallback`.
    func shared(_ fallback: Fallback, by coordinator: Coordinator = first) -> EndpointSharing {
        EndpointSharing(coordinator: ObjectIdentifier(coordinator), fallback: fallback)
    }

    func decision(_ admission: Slots.Admission) -> Slots.Decision {
        guard case .accepted(let decision) = admission else {
            Issue.record("rejected")
            return .init()
        }
        return decision
    }

    func released(_ ending: Slots.Ending?) -> Slots.Decision {
        guard case .released(let decision)? = ending else {
            Issue.record("not released: \(String(describing: ending))")
            return .init()
        }
        return decision
    }

    @Test("a request that may start asks for a lease, one ask at a time, and starts when it is granted")
    func asksThenStarts() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        let first = decision(slots.submit(1, kind: .short, now: .zero))
        #expect(first.start.isEmpty)
        #expect(first.acquireLease == 1)
        let second = decision(slots.submit(2, kind: .short, now: .zero))
        #expect(second.start.isEmpty)
        #expect(second.acquireLease == nil)   // one ask at a time
        #expect(slots.counts.queued == 2)
        let granted = slots.leaseAnswered(.granted(lease("a")), serial: 1, now: ms(1))
        #expect(granted.start == [1])
        #expect(granted.acquireLease == 2)   // the next in line asks at once
        #expect(slots.lease(of: 1) == lease("a"))
        let next = slots.leaseAnswered(.granted(lease("b")), serial: 2, now: ms(2))
        #expect(next.start == [2])
        #expect(next.acquireLease == nil)   // nobody waits
        #expect(slots.counts.running == 2)
    }

    @Test("FIFO within the process: leases go to the requests in their order of arrival")
    func fifo() {
        var slots = Slots(maxRequests: 5, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        for id in 1...4 { _ = slots.submit(id, kind: .short, now: .zero) }
        var order: [Int] = []
        for serial in 1...4 {
            order += slots.leaseAnswered(.granted(lease("t\(serial)")), serial: serial, now: ms(serial)).start
        }
        #expect(order == [1, 2, 3, 4])
    }

    @Test("a lease goes back exactly once when its request ends, however often the end is reported")
    func releasedOnce() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.leaseAnswered(.granted(lease("a")), serial: 1, now: ms(1))
        #expect(released(slots.end(1, outcome: .timedOut, now: ms(2))).releaseLeases == [lease("a")])
        #expect(slots.end(1, outcome: .failed, now: ms(3)) == nil)
        #expect(slots.end(1, outcome: .completed, now: ms(3)) == nil)
        #expect(slots.lease(of: 1) == nil)
    }

    @Test("a lease granted when no request can take it any more (cancelled while asking) goes back at once")
    func unusedLeaseGoesBack() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        #expect(slots.end(1, outcome: .failed, now: ms(1)) == .dequeued)
        let answer = slots.leaseAnswered(.granted(lease("a")), serial: 1, now: ms(2))
        #expect(answer.start.isEmpty)
        #expect(answer.releaseLeases == [lease("a")])
        // A stale answer (an ask no longer awaited) gives its lease back too.
        #expect(slots.leaseAnswered(.granted(lease("b")), serial: 7, now: ms(3)).releaseLeases == [lease("b")])
    }

    @Test("a full endpoint asks again at the time the answer says, or at once when a lease of this process goes back")
    func fullRetries() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.leaseAnswered(.granted(lease("a")), serial: 1, now: .zero)
        let full = decision(slots.submit(2, kind: .short, now: ms(1)))
        #expect(full.acquireLease == 2)
        let denied = slots.leaseAnswered(.full(retryIn: ms(50)), serial: 2, now: ms(2))
        #expect(denied.start.isEmpty)
        #expect(denied.wakeAt == ms(52))
        #expect(denied.acquireLease == nil)
        #expect(slots.wake(now: ms(30)).acquireLease == nil)   // too soon
        #expect(slots.wake(now: ms(52)).acquireLease == 3)
        _ = slots.leaseAnswered(.full(retryIn: ms(500)), serial: 3, now: ms(53))
        // Request 1 ends: its lease goes back and request 2 asks at once, not at 553 ms.
        let ending = released(slots.end(1, outcome: .completed, now: ms(60)))
        #expect(ending.releaseLeases == [lease("a")])
        #expect(ending.acquireLease == 4)
    }

    @Test("an answer paused pauses the endpoint (shown in its statistics) and asks again when the pause ends")
    func pausedAnswer() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        let paused = slots.leaseAnswered(.paused(remaining: ms(1_000)), serial: 1, now: ms(10))
        #expect(paused.start.isEmpty)
        #expect(paused.acquireLease == nil)
        #expect(paused.wakeAt == ms(1_010))
        #expect(slots.pausedUntil == ms(1_010))
        #expect(slots.wake(now: ms(1_010)).acquireLease == 2)
    }

    @Test("unavailable and failClosed: nothing starts until the coordinator is asked again")
    func failClosed() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        #expect(!slots.isCoordinatorUnavailable)
        let answer = slots.leaseAnswered(.unavailable(retryIn: ms(20)), serial: 1, now: ms(1))
        #expect(slots.isCoordinatorUnavailable)
        #expect(answer.start.isEmpty)
        #expect(answer.wakeAt == ms(21))
        #expect(decision(slots.submit(2, kind: .short, now: ms(5))).start.isEmpty)
        let retry = slots.wake(now: ms(21))
        #expect(retry.acquireLease == 2)
        #expect(slots.leaseAnswered(.granted(lease("a")), serial: 2, now: ms(22)).start == [1])
        #expect(!slots.isCoordinatorUnavailable)
    }

    @Test("unavailable and failOpen: the local limits only, no lease held or given back")
    func failOpen() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: shared(.failOpen))
        _ = slots.submit(1, kind: .short, now: .zero)
        #expect(slots.leaseAnswered(.unavailable(retryIn: ms(20)), serial: 1, now: ms(1)).start == [1])
        #expect(decision(slots.submit(2, kind: .short, now: ms(2))).start == [2])
        #expect(decision(slots.submit(3, kind: .short, now: ms(3))).start.isEmpty)   // maxRequests
        #expect(slots.lease(of: 1) == nil)
        let ending = released(slots.end(1, outcome: .completed, now: ms(4)))
        #expect(ending.releaseLeases.isEmpty)
        #expect(ending.start == [3])
        // Past the retry time the coordinator is asked again: first to adopt a request the
        // fallback started (2, the first still running); the new request waits.
        let next = decision(slots.submit(4, kind: .short, now: ms(25)))
        #expect(next.acquireLease == 2 && next.adoptsLease)
        #expect(next.start.isEmpty)
        #expect(released(slots.end(2, outcome: .completed, now: ms(25))).acquireLease == nil)   // one ask at a time
    }

    @Test("unavailable and localFallback(share:): at most maxRequests × share run (at least 1)")
    func localFallback() {
        var slots = Slots(maxRequests: 5, maxLongRequests: 1, rate: nil, sharing: shared(.localFallback(share: 0.5)))
        _ = slots.submit(1, kind: .short, now: .zero)
        let first = slots.leaseAnswered(.unavailable(retryIn: ms(100)), serial: 1, now: ms(1))
        #expect(first.start == [1])
        #expect(first.wakeAt == ms(101))   // when request 1, started alone, is to be adopted
        #expect(decision(slots.submit(2, kind: .short, now: ms(2))).start == [2])
        let third = decision(slots.submit(3, kind: .short, now: ms(3)))
        #expect(third.start.isEmpty)   // ⌊5 × 0.5⌋ = 2
        #expect(released(slots.end(1, outcome: .completed, now: ms(4))).start == [3])

        var tiny = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil, sharing: shared(.localFallback(share: 0.1)))
        _ = tiny.submit(1, kind: .short, now: .zero)
        #expect(tiny.leaseAnswered(.unavailable(retryIn: ms(100)), serial: 1, now: ms(1)).start == [1])   // at least 1
    }

    @Test("slots of this process alone never ask for a lease")
    func localNeverAsks() {
        var slots = Slots(maxRequests: 1, maxLongRequests: 0, rate: nil)
        let first = decision(slots.submit(1, kind: .short, now: .zero))
        #expect(first.start == [1] && first.acquireLease == nil)
        #expect(released(slots.end(1, outcome: .completed, now: ms(1))).releaseLeases.isEmpty)
    }

    @Test("turning sharing off forgets the ask on its way: its lease, when it comes, goes back")
    func sharingTurnedOff() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        #expect(slots.setLimits(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: nil, now: ms(1)).start == [1])
        #expect(slots.leaseAnswered(.granted(lease("a")), serial: 1, now: ms(2)).releaseLeases == [lease("a")])
    }

    @Test("a long request waiting for a long slot keeps its place; the short one behind it gets the lease")
    func longWaitsShortPasses() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .long(waits: true), now: .zero)
        _ = slots.leaseAnswered(.granted(lease("a")), serial: 1, now: .zero)
        _ = slots.submit(2, kind: .long(waits: true), now: ms(1))
        let short = decision(slots.submit(3, kind: .short, now: ms(2)))
        #expect(short.acquireLease == 2)
        #expect(slots.leaseAnswered(.granted(lease("b")), serial: 2, now: ms(3)).start == [3])
        #expect(slots.isQueued(2))
    }

    @Test("another coordinator with the same fallback is another sharing: the ask on its way is forgotten, its lease goes back, and the new coordinator is asked")
    func coordinatorSwitched() {
        var slots = Slots(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed))
        _ = slots.submit(1, kind: .short, now: .zero)
        let switched = slots.setLimits(maxRequests: 2, maxLongRequests: 1, rate: nil, sharing: shared(.failClosed, by: Self.second), now: ms(1))
        #expect(switched.acquireLease == 2)
        let stale = slots.leaseAnswered(.granted(lease("old")), serial: 1, now: ms(2))
        #expect(stale.start.isEmpty && stale.releaseLeases == [lease("old")])
        #expect(slots.leaseAnswered(.granted(lease("new")), serial: 2, now: ms(3)).start == [1])
        #expect(slots.lease(of: 1) == lease("new"))
    }

    // MARK: - Adoption: the requests a fallback started get leases once the coordinator answers

    @Test("once the coordinator may be asked again, the requests the fallback started are adopted first, one ask each; new starts wait, then ask as usual")
    func adoptedFirst() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failOpen))
        _ = slots.submit(1, kind: .short, now: .zero)
        let alone = slots.leaseAnswered(.unavailable(retryIn: ms(20)), serial: 1, now: ms(1))
        #expect(alone.start == [1])
        #expect(alone.wakeAt == ms(21))   // the fallback's end: time to adopt
        #expect(decision(slots.submit(2, kind: .short, now: ms(2))).start == [2])
        #expect(slots.book.unleasedCount == 2)
        let wake = slots.wake(now: ms(21))
        #expect(wake.acquireLease == 2 && wake.adoptsLease && wake.start.isEmpty)
        let third = decision(slots.submit(3, kind: .short, now: ms(22)))
        #expect(third.start.isEmpty && third.acquireLease == nil)   // waits for the adoptions
        let first = slots.leaseAnswered(.granted(lease("a")), serial: 2, now: ms(23))
        #expect(first.adopted == [1] && first.start.isEmpty)
        #expect(first.acquireLease == 3 && first.adoptsLease)
        #expect(slots.lease(of: 1) == lease("a"))
        let next = slots.leaseAnswered(.granted(lease("b")), serial: 3, now: ms(24))
        #expect(next.adopted == [2] && next.start.isEmpty)
        #expect(next.acquireLease == 4 && !next.adoptsLease)   // the new request asks as usual
        #expect(slots.book.unleasedCount == 0)
        // The fleet is over the limit: the new request waits until a lease goes back.
        let full = slots.leaseAnswered(.full(retryIn: ms(50)), serial: 4, now: ms(25))
        #expect(full.start.isEmpty && full.wakeAt == ms(75))
        #expect(!slots.isCoordinatorUnavailable)
        let ending = released(slots.end(1, outcome: .completed, now: ms(30)))
        #expect(ending.releaseLeases == [lease("a")])   // an adopted lease goes back like any other
        #expect(ending.acquireLease == 5 && !ending.adoptsLease)
        #expect(slots.leaseAnswered(.granted(lease("c")), serial: 5, now: ms(31)).start == [3])
        #expect(released(slots.end(2, outcome: .completed, now: ms(32))).releaseLeases == [lease("b")])
    }

    /// Slots under failOpen whose request 1 started alone (the coordinator was unavailable until
    /// 21 ms) and is being adopted: ask 2.
    func adopting(maxRequests: Int) -> Slots {
        var slots = Slots(maxRequests: maxRequests, maxLongRequests: 1, rate: nil, sharing: shared(.failOpen))
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.leaseAnswered(.unavailable(retryIn: ms(20)), serial: 1, now: ms(1))
        let wake = slots.wake(now: ms(21))
        #expect(wake.acquireLease == 2 && wake.adoptsLease)
        return slots
    }

    @Test("a request that ends before its adopted lease comes gives that lease back at once")
    func adoptedLeaseOfAnEndedRequestGoesBack() {
        var slots = adopting(maxRequests: 2)
        #expect(released(slots.end(1, outcome: .completed, now: ms(22))).releaseLeases.isEmpty)
        let answer = slots.leaseAnswered(.granted(lease("a")), serial: 2, now: ms(23))
        #expect(answer.releaseLeases == [lease("a")] && answer.adopted.isEmpty)
        #expect(slots.lease(of: 1) == nil)
    }

    @Test("an adoption answered unavailable keeps the fallback and tries again at its end; a declined one is not asked again")
    func adoptionUnavailable() {
        var slots = adopting(maxRequests: 3)
        let again = slots.leaseAnswered(.unavailable(retryIn: ms(30)), serial: 2, now: ms(22))
        #expect(again.wakeAt == ms(52) && slots.isCoordinatorUnavailable)
        #expect(decision(slots.submit(2, kind: .short, now: ms(23))).start == [2])   // the fallback still applies
        let retry = slots.wake(now: ms(52))
        #expect(retry.acquireLease == 3 && retry.adoptsLease)
        // A coordinator that declines an adoption (not the Redis one) is not asked again for it.
        _ = slots.leaseAnswered(.full(retryIn: ms(10)), serial: 3, now: ms(53))
        #expect(slots.book.unleasedCount == 1)
        let next = slots.wake(now: ms(63))
        #expect(next.acquireLease == 4 && next.adoptsLease)   // request 2's turn
    }

    @Test("a change of sharing to another coordinator keeps the requests to adopt, and the new one adopts them; a change to no sharing forgets them")
    func sharingChangeKeepsAdoptions() {
        var slots = Slots(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failOpen))
        _ = slots.submit(1, kind: .short, now: .zero)
        _ = slots.leaseAnswered(.unavailable(retryIn: ms(20)), serial: 1, now: ms(1))
        #expect(slots.book.unleasedCount == 1)
        // The same limit written again (a new coordinator object for the same client and key).
        let switched = slots.setLimits(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failOpen, by: Self.second), now: ms(2))
        #expect(slots.book.unleasedCount == 1)
        #expect(switched.acquireLease == 2 && switched.adoptsLease)
        let adopted = slots.leaseAnswered(.granted(EndpointLease(endpoint: "e", token: "t2")), serial: 2, now: ms(3))
        #expect(adopted.adopted == [1])
        #expect(slots.book.unleasedCount == 0)
        // A request the fallback started, then a change to local slots: nothing counts it, it is forgotten.
        _ = slots.setLimits(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: shared(.failOpen), now: ms(4))
        _ = slots.submit(2, kind: .short, now: ms(5))
        _ = slots.leaseAnswered(.unavailable(retryIn: ms(20)), serial: 3, now: ms(6))
        #expect(slots.book.unleasedCount == 1)
        let local = slots.setLimits(maxRequests: 3, maxLongRequests: 1, rate: nil, sharing: nil, now: ms(7))
        #expect(slots.book.unleasedCount == 0)
        #expect(local.acquireLease == nil)
    }
}
