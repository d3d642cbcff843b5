import Testing
@testable import ThreadKit
import SeededRandom

/// The shared start decision, driven with made-up times in microseconds (as Redis's `TIME` gives):
/// its rules one by one, a differential test against the local ``ThrottleSchedule``, and seeded
/// random interleavings of several processes checked against the rules.
@Suite("SharedThrottle")
struct SharedThrottleTests {
    typealias Request = SharedThrottle.Request

    func request(
        _ now: Int64, gap: Int64 = 100, monitor: ThrottledQueue.Monitor = .concurrent,
        limit: (count: Int, window: Int64)? = nil, horizon: Int64 = 1_000_000, holding: UInt64? = nil,
        token: UInt64 = 1, asker: UInt64 = 1
    ) -> Request {
        Request(
            now: now, gap: gap, monitor: monitor, limit: limit, horizon: horizon, leaseTTL: 10_000, holding: holding,
            token: token, asker: asker)
    }

    // MARK: - The rules, one by one

    @Test("The first start is reserved at once, with no wait")
    func firstStartAtOnce() {
        var model = SharedThrottle()
        let answer1 = model.request(request(5_000))
        #expect(answer1 == .reserved(at: 5_000, wait: 0, token: nil))
        #expect(model.lastStart == 5_000)
    }

    @Test(".concurrent: the next start waits for the gap that follows the last start, from its start")
    func concurrentGapFromStart() {
        var model = SharedThrottle()
        _ = model.request(request(1_000, gap: 300))
        // The requester's own gap (50) follows its start; the last start's (300) decides this one.
        let answer2 = model.request(request(1_010, gap: 50))
        #expect(answer2 == .reserved(at: 1_300, wait: 290, token: nil))
        let answer3 = model.request(request(1_020, gap: 50))
        #expect(answer3 == .reserved(at: 1_350, wait: 330, token: nil))
        // Once the gap has passed, at once.
        let answer4 = model.request(request(9_000, gap: 50))
        #expect(answer4 == .reserved(at: 9_000, wait: 0, token: nil))
    }

    @Test("At most N starts in any window W: the (N+1)-th waits for the window from the N-th before it")
    func slidingWindow() {
        var model = SharedThrottle()
        let limit = (count: 3, window: Int64(1_000))
        for now: Int64 in [0, 10, 20] {
            let answer5 = model.request(request(now, gap: 0, limit: limit))
            #expect(answer5 == .reserved(at: now, wait: 0, token: nil))
        }
        let answer6 = model.request(request(30, gap: 0, limit: limit))
        #expect(answer6 == .reserved(at: 1_000, wait: 970, token: nil))
        let answer7 = model.request(request(40, gap: 0, limit: limit))
        #expect(answer7 == .reserved(at: 1_010, wait: 970, token: nil))
        #expect(model.log == [20, 1_000, 1_010])
    }

    @Test("The log never holds more than N starts")
    func logIsBounded() {
        var model = SharedThrottle()
        for now in stride(from: Int64(0), to: 100_000, by: 1_000) {
            _ = model.request(request(now, gap: 0, limit: (4, 3_500)))
            #expect(model.log.count <= 4)
        }
        #expect(model.log == [96_000, 97_000, 98_000, 99_000])
    }

    @Test("No start before a pause ends; a pause is never shortened, and one already past is none")
    func pauses() {
        var model = SharedThrottle()
        model.pause(for: 4_000, now: 1_000)
        model.pause(for: 2_000, now: 1_000)
        #expect(model.pausedUntil == 5_000)
        model.pause(for: -100, now: 1_000)
        #expect(model.pausedUntil == 5_000)
        let answer8 = model.request(request(1_000))
        #expect(answer8 == .reserved(at: 5_000, wait: 4_000, token: nil))
        model.pause(for: 5_000, now: 2_000)
        #expect(model.pausedUntil == 7_000)
        // Once passed, the pause is dropped.
        _ = model.request(request(8_000))
        #expect(model.pausedUntil == nil)
    }

    @Test("Beyond the horizon nothing is recorded, and the decline says when the start would fall inside it")
    func horizonDeclines() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 10_000))
        // The same state, its clock's mark moved to 100 (a pause of no duration only does that).
        var before = model
        _ = before.pause(for: 0, now: 100)
        let answer9 = model.request(request(100, horizon: 2_000))
        #expect(answer9 == .declined(retryIn: 7_900))
        #expect(model == before)
        let answer10 = model.request(request(8_000, horizon: 2_000))
        #expect(answer10 == .reserved(at: 10_000, wait: 2_000, token: nil))
    }

    @Test(".serial: another process's lease declines until it expires or one horizon passes; the gap counts from the end")
    func serialLease() {
        var model = SharedThrottle()
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 100, monitor: .serial)) else {
            Issue.record("no lease: \(model)")
            return
        }
        #expect(model.lease == SharedThrottle.Lease(token: token, expiry: 10_000, reserves: 1, ends: 0))
        let answer11 = model.request(request(50, monitor: .serial, horizon: 1_000, token: 2, asker: 2))
        #expect(answer11 == .declined(retryIn: 1_000))
        let answer12 = model.request(request(8_500, monitor: .serial, horizon: 5_000, token: 2, asker: 2))
        #expect(answer12 == .declined(retryIn: 1_500))
        let answer13 = model.finished(token: token, number: 1, now: 9_600)
        #expect(answer13)
        #expect(model.lease == nil)
        guard case .reserved(9_700, 100, let next?) = model.request(request(9_600, monitor: .serial, token: 2, asker: 2)) else {
            Issue.record("no start after the end: \(model)")
            return
        }
        #expect(next != token)
        // A token handed back again, or one that never held the lease, changes nothing.
        let answer14 = model.finished(token: token, number: 2, now: 9_800)
        #expect(!answer14)
        #expect(model.lease?.token == next)
    }

    @Test(".serial: an expired lease is dropped, its start taken to have ended at the expiry")
    func serialLeaseExpires() {
        var model = SharedThrottle()
        guard case .reserved(_, _, let token?) = model.request(request(0, gap: 100, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        guard case .reserved(10_100, 100, _?) = model.request(request(10_000, gap: 100, monitor: .serial, token: 2)) else {
            Issue.record("the expired lease still holds: \(model)")
            return
        }
        #expect(model.lastStart == 10_100)
        // The crashed holder's late end is ignored.
        let answer15 = model.finished(token: token, number: 1, now: 10_050)
        #expect(!answer15)
    }

    @Test(".serial: a start nested in the holder's task counts its gap from that task's start, under the same lease")
    func serialNested() {
        var model = SharedThrottle()
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 100, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        let answer16 = model.request(request(20, gap: 40, monitor: .serial, holding: token))
        #expect(answer16 == .reserved(at: 100, wait: 80, token: token))
        #expect(model.lease?.reserves == 2)
        let answer17 = model.finished(token: token, number: 1, now: 150)
        #expect(answer17)
        // After the nested task's end, the next nested start counts from that end.
        let answer18 = model.request(request(160, gap: 40, monitor: .serial, holding: token))
        #expect(answer18 == .reserved(at: 190, wait: 30, token: token))
        let answer19 = model.finished(token: token, number: 2, now: 200)
        #expect(answer19)
        let answer20 = model.finished(token: token, number: 3, now: 210)
        #expect(answer20)
        #expect(model.lease == nil)
        let answer21 = model.request(request(210, monitor: .serial, token: 7))
        #expect(answer21 == .reserved(at: 250, wait: 40, token: 7))
    }

    @Test("An end is never before its start: a reservation given up early counts its gap from its start")
    func endNeverBeforeStart() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 1_000, monitor: .serial))
        guard case .reserved(1_000, 1_000, let token?) = model.request(request(0, gap: 100, monitor: .serial, holding: model.lease?.token)) else {
            Issue.record("no nested start")
            return
        }
        _ = model.finished(token: token, number: 1, now: 10)
        #expect(model.lastEnd == 1_000)
    }

    @Test("A consumed command counts as a start: the next one waits its gap and the window")
    func consumedCounts() {
        var model = SharedThrottle()
        model.recordConsumed(at: 500, gap: 200, rules: .init(monitor: .concurrent, limit: .init(count: 2, window: 1_000)))
        let answer22 = model.request(request(510, gap: 0, limit: (2, 1_000)))
        #expect(answer22 == .reserved(at: 700, wait: 190, token: nil))
        let answer23 = model.request(request(710, gap: 0, limit: (2, 1_000)))
        #expect(answer23 == .reserved(at: 1_500, wait: 790, token: nil))
    }

    @Test("Times far out clamp to ±(2^53 − 1), the integers a Lua number holds exactly, instead of wrapping around")
    func farOutClamps() {
        let limit = SharedThrottle.microsecondLimit
        #expect(limit == 9_007_199_254_740_991)
        var model = SharedThrottle()
        _ = model.request(request(1_000, gap: .max))
        #expect(model.lastGap == limit)
        let answer24 = model.request(request(2_000, horizon: .max))
        #expect(answer24 == .reserved(at: limit, wait: limit - 2_000, token: nil))
        model.pause(for: .max, now: 3_000)
        #expect(model.pausedUntil == limit)
        #expect(model.expiry == limit)
        // A window of Int64.max: the next start is at the limit, never a wrapped negative time.
        var windowed = SharedThrottle()
        _ = windowed.request(request(5, gap: 0, limit: (1, .max)))
        let windowAnswer = windowed.request(request(6, gap: 0, limit: (1, .max), horizon: .max))
        #expect(windowAnswer == .reserved(at: limit, wait: limit - 6, token: nil))
        // A serial lease of Int64.max and a clock far out clamp too.
        var serial = SharedThrottle()
        _ = serial.request(Request(now: .max, gap: .max, monitor: .serial, limit: nil, horizon: .max, leaseTTL: .max, token: 1, asker: 1))
        #expect(serial.lease?.expiry == limit)
        #expect(serial.lastStart == limit)
        #expect(Duration.seconds(Int64.max).microsecondsRoundedUp == .max)
        #expect(Duration.nanoseconds(1_001).microsecondsRoundedUp == 2)
        #expect((Duration.zero - .nanoseconds(1_500)).microsecondsRoundedUp == -1)
    }

    // MARK: - Step 2: strictness

    @Test("A decline never says less than 1 ms: no busy loop, however short the horizon or near the lease's expiry")
    func retryFloor() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 10_000))
        let nearHorizon = model.request(request(0, horizon: 9_999))
        #expect(nearHorizon == .declined(retryIn: SharedThrottle.minimumRetry))
        var serial = SharedThrottle()
        _ = serial.request(request(0, monitor: .serial))
        let nearExpiry = serial.request(request(9_999, monitor: .serial))
        #expect(nearExpiry == .declined(retryIn: 1_000))
    }

    @Test(".serial: a lease that expires while its task still runs ends it at the expiry, not at a nested task's earlier end")
    func expiredLeaseEndsAtExpiry() {
        var model = SharedThrottle()
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 100, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        _ = model.request(request(20, gap: 500, monitor: .serial, holding: token))
        let nestedEnded = model.finished(token: token, number: 1, now: 150)
        #expect(nestedEnded)
        #expect(model.lease?.reserves == 2 && model.lease?.ends == 1)
        // The outer task never reports its end; its lease (expiry 10_100, the nested start's) runs out.
        let next = model.request(request(10_200, monitor: .serial, token: 9))
        #expect(next == .reserved(at: 10_600, wait: 400, token: 9))
    }

    @Test("The first request's monitor and limit are stored with the state; other rules are a mismatch that changes nothing")
    func rulesMismatch() {
        var model = SharedThrottle()
        let limit = (count: 3, window: Int64(1_000))
        _ = model.request(request(0, gap: 0, limit: limit))
        let stored = SharedThrottle.Rules(monitor: .concurrent, limit: .init(count: 3, window: 1_000))
        #expect(model.rules == stored)
        var before = model
        _ = before.pause(for: 0, now: 10)
        let serial = model.request(request(10, gap: 0, monitor: .serial, limit: limit))
        #expect(serial == .mismatch(stored: stored))
        let smaller = model.request(request(10, gap: 0, limit: (2, 1_000)))
        #expect(smaller == .mismatch(stored: stored))
        let shorter = model.request(request(10, gap: 0, limit: (3, 999)))
        #expect(shorter == .mismatch(stored: stored))
        // A request without a limit is another configuration too: it may not start unlogged.
        let unlimited = model.request(request(10, gap: 0))
        #expect(unlimited == .mismatch(stored: stored))
        #expect(model == before)
        // Another gap is no mismatch: each process has its own interval.
        let otherGap = model.request(request(10, gap: 50, limit: limit))
        #expect(otherGap == .reserved(at: 10, wait: 0, token: nil))
        // A consumed command under other rules is not recorded either.
        let recorded = model.recordConsumed(at: 20, gap: 0, rules: .init(monitor: .serial, limit: nil))
        #expect(!recorded)
        #expect(model.log == [0, 10])
    }

    @Test("Once nothing binds (the expiry, the script's TTL), the state is dropped, its rules with it")
    func stateExpires() {
        var model = SharedThrottle()
        #expect(model.expiry == nil)
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 300, monitor: .serial, limit: (2, 5_000))) else {
            Issue.record("no lease")
            return
        }
        // While the start runs, its lease's expiry plus the gap; after its end, the window from it.
        #expect(model.expiry == 10_300)
        _ = model.finished(token: token, number: 1, now: 400)
        #expect(model.expiry == 5_000)
        model.pause(for: 6_500, now: 500)
        #expect(model.expiry == 7_000)
        let early = model.request(request(6_999, gap: 0))
        #expect(early == .mismatch(stored: .init(monitor: .serial, limit: .init(count: 2, window: 5_000))))
        let later = model.request(request(7_000, gap: 0))
        #expect(later == .reserved(at: 7_000, wait: 0, token: nil))
        #expect(model.rules == SharedThrottle.Rules(monitor: .concurrent, limit: nil))
        #expect(model.log.isEmpty)
    }

    // MARK: - Step 3: what the script needs

    @Test("A clock that steps back moves no decision back: every operation takes the latest now seen")
    func clockHighWaterMark() {
        var model = SharedThrottle()
        _ = model.request(request(10_000, gap: 300))
        #expect(model.lastNow == 10_000)
        // Read 4 ms behind: decided at 10_000, as if no time had passed.
        let behind = model.request(request(6_000, gap: 300))
        #expect(behind == .reserved(at: 10_300, wait: 300, token: nil))
        #expect(model.lastNow == 10_000)
        // A pause of 1 ms asked with a clock behind runs from the mark.
        let paused = model.pause(for: 1_000, now: 5_000)
        #expect(paused == 11_000)
    }

    @Test("A late end of an expired lease changes nothing, even when no request came after the expiry")
    func lateFinishOfExpiredLease() {
        var model = SharedThrottle()
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 100, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        // The lease expired at 10_000: its start ended then, whatever the holder says later (the
        // state binds until 10_100, the gap after that end).
        let accepted = model.finished(token: token, number: 1, now: 10_050)
        #expect(!accepted)
        #expect(model.lease == nil)
        #expect(model.lastEnd == 10_000)
    }

    @Test("A new lease takes the token its asker proposed; a start nested in a held lease keeps that lease's")
    func proposedTokens() {
        var model = SharedThrottle()
        let first = model.request(request(7_000, monitor: .serial, token: 4_242))
        #expect(first == .reserved(at: 7_000, wait: 0, token: 4_242))
        let nested = model.request(request(7_010, monitor: .serial, holding: 4_242, token: 99))
        #expect(nested == .reserved(at: 7_100, wait: 90, token: 4_242))
        #expect(model.lease == SharedThrottle.Lease(token: 4_242, expiry: 17_100, reserves: 2, ends: 0))
        // Holding a lease that has gone (expired, handed back): a new one, with the proposed token.
        _ = model.finished(token: 4_242, number: 2, now: 7_200)
        let orphan = model.request(request(7_300, monitor: .serial, holding: 4_242, token: 77))
        #expect(orphan == .reserved(at: 7_300, wait: 0, token: 77))
    }

    @Test("A reserve whose outcome the asker never learned is handed back by its proposed token at once, not at its TTL")
    func unknownOutcomeHandedBack() {
        var model = SharedThrottle()
        // The reply was lost: the asker does not know whether the lease was taken.
        _ = model.request(request(0, monitor: .serial, token: 31, asker: 1))
        let handedBack = model.finished(token: 31, number: 1, now: 50)
        #expect(handedBack)
        #expect(model.lease == nil)
        let other = model.request(request(60, gap: 0, monitor: .serial, token: 32, asker: 2))
        #expect(other == .reserved(at: 150, wait: 90, token: 32))
        // Had it not run, the same end finds no lease of that token and changes nothing.
        let before = model
        let noLease = model.finished(token: 31, number: 1, now: 60)
        #expect(!noLease)
        #expect(model == before)
    }

    @Test("An end sent again or arriving after a later one changes nothing; the lease ends once the ends reach its starts")
    func idempotentEnds() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 10, monitor: .serial, token: 5))
        _ = model.request(request(5, gap: 10, monitor: .serial, holding: 5))
        _ = model.request(request(6, gap: 10, monitor: .serial, holding: 5))
        #expect(model.lease?.reserves == 3)
        let first = model.finished(token: 5, number: 1, now: 30)
        #expect(first && model.lease?.ends == 1 && model.lastEnd == 30)
        // The same end again (its reply was lost), later: nothing moves, not even the end time.
        let repeated = model.finished(token: 5, number: 1, now: 40)
        #expect(repeated && model.lease?.ends == 1 && model.lastEnd == 30)
        // End 3 overtakes end 2: the lease ends; end 2 arriving late finds no lease.
        let third = model.finished(token: 5, number: 3, now: 50)
        #expect(third && model.lease == nil && model.lastEnd == 50)
        let late = model.finished(token: 5, number: 2, now: 55)
        #expect(!late && model.lastEnd == 50)
        // A final end numbered past the starts (a nested reserve counted that never ran) ends it too.
        _ = model.request(request(100, gap: 0, monitor: .serial, token: 6))
        let past = model.finished(token: 6, number: 2, now: 120)
        #expect(past && model.lease == nil)
    }

    // MARK: - Served in turn

    @Test(".serial: two askers with backlogs alternate: the holder's next reserve queues behind the one that waited")
    func twoAskersAlternate() {
        var model = SharedThrottle()
        var holders: [UInt64] = []
        var token: UInt64 = 100
        // Each asker's next event: an ask, or the end of its running task (with its token). A and
        // B each have a backlog: A asks again right after its own end, B when told to.
        var events: [UInt64: (at: Int64, token: UInt64?)] = [1: (0, nil), 2: (10, nil)]
        for _ in 0..<200 where holders.count < 10 {
            let (asker, event) = events.min { ($0.value.at, $0.key) < ($1.value.at, $1.key) }!
            if let held = event.token {
                _ = model.finished(token: held, number: 1, now: event.at)
                events[asker] = (event.at, nil)
                continue
            }
            token += 1
            switch model.request(request(event.at, gap: 50, monitor: .serial, token: token, asker: asker)) {
            case .reserved(let at, _, let held?):
                holders.append(asker)
                // Its task runs 500 µs.
                events[asker] = (at + 500, held)
                #expect(at >= (model.lastEnd ?? 0), "a start before the end before it")
            case .declined(let retryIn):
                events[asker] = (event.at + retryIn, nil)
            default:
                Issue.record("unexpected answer at \(event.at)")
                return
            }
        }
        #expect(holders == [1, 2, 1, 2, 1, 2, 1, 2, 1, 2])
    }

    @Test(".serial: a waiter that stops asking is dropped after its retry and the grace, and holds the line up no longer")
    func deadWaiterDropped() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 0, monitor: .serial, token: 10, asker: 1))
        // B is declined (told to ask again in one horizon, sooner than a poll), then dies.
        let declined = model.request(request(100, monitor: .serial, horizon: 5_000, token: 11, asker: 2))
        #expect(declined == .declined(retryIn: 5_000))
        let deadline = 100 + 5_000 + SharedThrottle.waiterGrace
        #expect(model.waiters == [SharedThrottle.Waiter(asker: 2, since: 100, liveUntil: deadline)])
        _ = model.finished(token: 10, number: 1, now: 200)
        // Until then A is held behind B; the expiry keeps the line with the state.
        #expect(model.expiry == deadline)
        let held = model.request(request(deadline - 1, gap: 0, monitor: .serial, token: 12, asker: 1))
        #expect(held == .declined(retryIn: 2 * SharedThrottle.waiterPoll))
        // A joined the line meanwhile; once B's life is over, A is first and is served.
        let served = model.request(request(deadline, gap: 0, monitor: .serial, token: 13, asker: 1))
        #expect(served == .reserved(at: deadline, wait: 0, token: 13))
        #expect(model.waiters.isEmpty)
    }

    @Test(".serial: a start nested in the holder's task bypasses the line")
    func nestedBypassesTheLine() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 0, monitor: .serial, token: 10, asker: 1))
        _ = model.request(request(10, monitor: .serial, token: 11, asker: 2))
        #expect(model.waiters.map(\.asker) == [2])
        let nested = model.request(request(20, gap: 0, monitor: .serial, holding: 10, token: 12, asker: 1))
        #expect(nested == .reserved(at: 20, wait: 0, token: 10))
        #expect(model.waiters.map(\.asker) == [2])
    }

    @Test(".serial: the line keeps the order of first asks; asking again keeps a waiter's place, a grant takes it out")
    func lineOrder() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 0, monitor: .serial, token: 10, asker: 1))
        _ = model.request(request(10, monitor: .serial, token: 11, asker: 3))
        _ = model.request(request(20, monitor: .serial, token: 12, asker: 2))
        _ = model.request(request(30, monitor: .serial, token: 13, asker: 3))
        #expect(model.waiters.map(\.asker) == [3, 2])
        // Told to ask again when the lease expires (10_000), sooner than a poll.
        #expect(model.waiters[0].since == 10 && model.waiters[0].liveUntil == 10_000 + SharedThrottle.waiterGrace)
        _ = model.finished(token: 10, number: 1, now: 40)
        // The lease is free: 2 is not first, 3 is; second in line, 2 polls at half the first's pace.
        let second = model.request(request(50, gap: 0, monitor: .serial, token: 14, asker: 2))
        #expect(second == .declined(retryIn: 2 * SharedThrottle.waiterPoll))
        let first = model.request(request(60, gap: 0, monitor: .serial, token: 15, asker: 3))
        #expect(first == .reserved(at: 60, wait: 0, token: 15))
        #expect(model.waiters.map(\.asker) == [2])
        // `.concurrent` requests know no line.
        var concurrent = SharedThrottle()
        _ = concurrent.request(request(0, gap: 10_000, horizon: 100, asker: 1))
        _ = concurrent.request(request(10, gap: 0, horizon: 100, asker: 2))
        #expect(concurrent.waiters.isEmpty)
    }

    @Test(".serial: a waiter declined for the horizon is told to ask again within it, and keeps its place for that and the grace; the others wait for it")
    func horizonWaiterKeepsItsPlace() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 50_000, monitor: .serial, token: 10, asker: 1))
        _ = model.finished(token: 10, number: 1, now: 100)
        // The next start is at 50_100: beyond a 1 ms horizon, 2 is told to ask again within the
        // horizon (not in 49 ms), and stays in line for that and the grace.
        let far = model.request(request(200, gap: 0, monitor: .serial, horizon: 1_000, token: 11, asker: 2))
        #expect(far == .declined(retryIn: 1_000))
        #expect(model.waiters == [SharedThrottle.Waiter(asker: 2, since: 200, liveUntil: 200 + 1_000 + SharedThrottle.waiterGrace)])
        // Second in line: twice the poll, beyond the horizon.
        let other = model.request(request(49_500, gap: 0, monitor: .serial, horizon: 1_000, token: 12, asker: 1))
        #expect(other == .declined(retryIn: 2 * SharedThrottle.waiterPoll))
        let back = model.request(request(49_100, gap: 0, monitor: .serial, horizon: 1_000, token: 13, asker: 2))
        #expect(back == .reserved(at: 50_100, wait: 600, token: 13))
    }

    @Test(".serial: waiters further back poll less (the poll times one more than the rank, up to five polls); the first keeps the poll")
    func retryGrowsWithRank() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 0, monitor: .serial, token: 10, asker: 100))
        // The lease expires at 10_000: the first waiter is told that (sooner than a poll), the next ones more.
        let retries = (1...7).map { asker -> Request in request(Int64(asker), gap: 0, monitor: .serial, token: 10 + UInt64(asker), asker: UInt64(asker)) }
            .map { model.request($0) }
        let poll = SharedThrottle.waiterPoll
        #expect(retries == [9_999, 2 * poll, 3 * poll, 4 * poll, 5 * poll, 5 * poll, 5 * poll].map { .declined(retryIn: $0) })
        #expect(model.waiters.map(\.asker) == Array(1...7))
        #expect(model.waiters.map(\.liveUntil) == zip(1...7, [9_999, 2 * poll, 3 * poll, 4 * poll, 5 * poll, 5 * poll, 5 * poll]).map {
            Int64($0) + $1 + SharedThrottle.waiterGrace
        })
    }

    @Test(".serial: the line holds at most maxWaiters askers; one more is declined without a place, and takes one once a place is free")
    func lineIsCapped() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 0, monitor: .serial, token: 10, asker: 1_000))
        for asker in 1...SharedThrottle.maxWaiters {
            _ = model.request(request(1, gap: 0, monitor: .serial, token: 11, asker: UInt64(asker)))
        }
        #expect(model.waiters.count == SharedThrottle.maxWaiters)
        let beyond = model.request(request(2, gap: 0, monitor: .serial, token: 12, asker: 999))
        #expect(beyond == .declined(retryIn: SharedThrottle.maxWaiterPoll))
        #expect(model.waiters.count == SharedThrottle.maxWaiters && !model.waiters.contains { $0.asker == 999 })
        // The lease goes to the first in line, which leaves it: a place is free for 999.
        _ = model.finished(token: 10, number: 1, now: 3)
        let first = model.request(request(4, gap: 0, monitor: .serial, token: 13, asker: 1))
        #expect(first == .reserved(at: 4, wait: 0, token: 13))
        _ = model.request(request(5, gap: 0, monitor: .serial, token: 14, asker: 999))
        #expect(model.waiters.count == SharedThrottle.maxWaiters && model.waiters.last?.asker == 999)
    }

    @Test(".serial: however long the wait (a pause of an hour), a waiter is told to ask again within the horizon, and its place outlives it by the horizon and the grace at most")
    func waiterLifeBoundedByTheHorizon() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 0, monitor: .serial, token: 10, asker: 1))
        _ = model.finished(token: 10, number: 1, now: 10)
        _ = model.pause(for: 3_600_000_000, now: 20)
        let declined = model.request(request(30, gap: 0, monitor: .serial, horizon: 1_000_000, token: 11, asker: 2))
        #expect(declined == .declined(retryIn: 1_000_000))
        #expect(model.waiters == [SharedThrottle.Waiter(asker: 2, since: 30, liveUntil: 30 + 1_000_000 + SharedThrottle.waiterGrace)])
        // Gone once that passed without an ask.
        _ = model.request(request(30 + 1_000_000 + SharedThrottle.waiterGrace, gap: 0, monitor: .serial, token: 12, asker: 3))
        #expect(model.waiters.map(\.asker) == [3])
    }

    @Test(".serial: a renewed lease lasts leaseTTL from the renewal, is never shortened, and an expired one is not brought back")
    func leaseRenewal() {
        var model = SharedThrottle()
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 100, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        let renewed1 = model.renew(token: token, leaseTTL: 10_000, now: 8_000)
        #expect(renewed1)
        #expect(model.lease?.expiry == 18_000)
        // Renewed for less than it has left: unchanged.
        let renewed2 = model.renew(token: token, leaseTTL: 1_000, now: 9_000)
        #expect(renewed2)
        #expect(model.lease?.expiry == 18_000)
        // Other processes are declined past the first expiry.
        let declined = model.request(request(12_000, monitor: .serial, horizon: 100_000))
        #expect(declined == .declined(retryIn: 6_000))
        let renewed3 = model.renew(token: token + 1, leaseTTL: 10_000, now: 12_000)
        #expect(!renewed3)
        // Once expired, the lease is gone for good.
        let renewed4 = model.renew(token: token, leaseTTL: 10_000, now: 18_000)
        #expect(!renewed4)
        #expect(model.lease == nil)
    }
}
