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
        limit: (count: Int, window: Int64)? = nil, horizon: Int64 = 1_000_000, holding: UInt64? = nil
    ) -> Request {
        Request(now: now, gap: gap, monitor: monitor, limit: limit, horizon: horizon, leaseTTL: 10_000, holding: holding)
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
        #expect(model.lease == SharedThrottle.Lease(token: token, expiry: 10_000, running: 1))
        let answer11 = model.request(request(50, monitor: .serial, horizon: 1_000))
        #expect(answer11 == .declined(retryIn: 1_000))
        let answer12 = model.request(request(8_500, monitor: .serial, horizon: 5_000))
        #expect(answer12 == .declined(retryIn: 1_500))
        let answer13 = model.finished(token: token, now: 9_600)
        #expect(answer13)
        #expect(model.lease == nil)
        guard case .reserved(9_700, 100, let next?) = model.request(request(9_600, monitor: .serial)) else {
            Issue.record("no start after the end: \(model)")
            return
        }
        #expect(next != token)
        // A token handed back again, or one that never held the lease, changes nothing.
        let answer14 = model.finished(token: token, now: 9_800)
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
        guard case .reserved(10_100, 100, _?) = model.request(request(10_000, gap: 100, monitor: .serial)) else {
            Issue.record("the expired lease still holds: \(model)")
            return
        }
        #expect(model.lastStart == 10_100)
        // The crashed holder's late end is ignored.
        let answer15 = model.finished(token: token, now: 10_050)
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
        #expect(model.lease?.running == 2)
        let answer17 = model.finished(token: token, now: 150)
        #expect(answer17)
        // After the nested task's end, the next nested start counts from that end.
        let answer18 = model.request(request(160, gap: 40, monitor: .serial, holding: token))
        #expect(answer18 == .reserved(at: 190, wait: 30, token: token))
        let answer19 = model.finished(token: token, now: 200)
        #expect(answer19)
        let answer20 = model.finished(token: token, now: 210)
        #expect(answer20)
        #expect(model.lease == nil)
        let answer21 = model.request(request(210, monitor: .serial))
        #expect(answer21 == .reserved(at: 250, wait: 40, token: token + 1))
    }

    @Test("An end is never before its start: a reservation given up early counts its gap from its start")
    func endNeverBeforeStart() {
        var model = SharedThrottle()
        _ = model.request(request(0, gap: 1_000, monitor: .serial))
        guard case .reserved(1_000, 1_000, let token?) = model.request(request(0, gap: 100, monitor: .serial, holding: model.lease?.token)) else {
            Issue.record("no nested start")
            return
        }
        _ = model.finished(token: token, now: 10)
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
        _ = serial.request(Request(now: .max, gap: .max, monitor: .serial, limit: nil, horizon: .max, leaseTTL: .max))
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
        let nestedEnded = model.finished(token: token, now: 150)
        #expect(nestedEnded)
        #expect(model.lease?.running == 1)
        // The outer task never reports its end; its lease (expiry 10_100, the nested start's) runs out.
        let next = model.request(request(10_200, monitor: .serial))
        #expect(next == .reserved(at: 10_600, wait: 400, token: token + 1))
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

    @Test("Once nothing binds (the expiry, the script's TTL), the state is dropped, its rules with it; tokens keep counting")
    func stateExpires() {
        var model = SharedThrottle()
        #expect(model.expiry == nil)
        guard case .reserved(0, 0, let token?) = model.request(request(0, gap: 300, monitor: .serial, limit: (2, 5_000))) else {
            Issue.record("no lease")
            return
        }
        // While the start runs, its lease's expiry plus the gap; after its end, the window from it.
        #expect(model.expiry == 10_300)
        _ = model.finished(token: token, now: 400)
        #expect(model.expiry == 5_000)
        model.pause(for: 6_500, now: 500)
        #expect(model.expiry == 7_000)
        let early = model.request(request(6_999, gap: 0))
        #expect(early == .mismatch(stored: .init(monitor: .serial, limit: .init(count: 2, window: 5_000))))
        let later = model.request(request(7_000, gap: 0))
        #expect(later == .reserved(at: 7_000, wait: 0, token: nil))
        #expect(model.rules == SharedThrottle.Rules(monitor: .concurrent, limit: nil))
        #expect(model.log.isEmpty)
        #expect(model.lastToken == token)
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
        let accepted = model.finished(token: token, now: 10_050)
        #expect(!accepted)
        #expect(model.lease == nil)
        #expect(model.lastEnd == 10_000)
    }

    @Test("Tokens start above the clock, so a counter lost with the state (a restart) never hands a held token out again")
    func tokensStartAboveTheClock() {
        var model = SharedThrottle()
        guard case .reserved(_, _, let first?) = model.request(request(7_000, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        #expect(first == 7_001)
        _ = model.finished(token: first, now: 7_010)
        let second = model.request(request(7_200, monitor: .serial))
        #expect(second == .reserved(at: 7_200, wait: 0, token: 7_002))
        // A decider that lost everything (a restarted server) starts again above its clock.
        var restarted = SharedThrottle()
        guard case .reserved(_, _, let afterRestart?) = restarted.request(request(8_000, monitor: .serial)) else {
            Issue.record("no lease")
            return
        }
        #expect(afterRestart > 7_002)
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
