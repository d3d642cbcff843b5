import Testing
@testable import ThreadKit

/// A coordinated queue's side of its starts, driven with made-up instants (milliseconds after an
/// origin) and made-up answers: when it asks, waits, starts, gives a reservation up, and what each
/// unavailable policy does.
@Suite("CoordinatedStarts")
struct CoordinatedStartsTests {
    func at(_ milliseconds: Int) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: 1_000_000_000_000).advanced(by: .milliseconds(milliseconds))
    }

    /// Steps a start that the local rules allow from `allowed`, at `now`.
    func step(_ starts: inout CoordinatedStarts, allowed: Int, now: Int, nested: Bool = false,
              gap: Duration = .milliseconds(100), monitor: ThrottledQueue.Monitor = .concurrent,
              limit: RateLimit? = nil) -> CoordinatedStarts.Step {
        starts.step(localAllowed: at(allowed), now: at(now), nested: nested, gap: gap, monitor: monitor, limit: limit)
    }

    func request(gap: Duration = .milliseconds(100), monitor: ThrottledQueue.Monitor = .concurrent, holding: UInt64? = nil) -> CoordinatedStarts.Step {
        .ask(CoordinatedRequest(gap: gap, monitor: monitor, limit: nil, holding: holding, asker: 5))
    }

    @Test("It asks once; others wait for the answer; a reservation starts at its time, counted from the answer's arrival")
    func askThenStart() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        let answer1 = step(&starts, allowed: 0, now: 5)
        #expect(answer1 == request())
        let answer2 = step(&starts, allowed: 0, now: 6)
        #expect(answer2 == .awaitAnswer)
        let answer3 = starts.answered(.reserved(wait: .milliseconds(20), token: nil), now: at(8))
        #expect(answer3 == .unchanged)
        let answer4 = step(&starts, allowed: 0, now: 9)
        #expect(answer4 == .startAt(at(28)))
        starts.started()
        #expect(starts.reservation == nil)
        #expect(starts.running == [nil])
        let answer5 = starts.ended(now: at(40))
        #expect(answer5.isEmpty)
        #expect(starts.running.isEmpty)
    }

    @Test("A decline is asked again at the time it gave, not before")
    func declineWaits() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0)
        _ = starts.answered(.declined(retryIn: .milliseconds(300)), now: at(1))
        let answer6 = step(&starts, allowed: 0, now: 2)
        #expect(answer6 == .wait(until: at(301)))
        let answer7 = step(&starts, allowed: 0, now: 301)
        #expect(answer7 == request())
    }

    @Test("A reservation that the local rules have moved past (a pause) is given up, its lease handed back, and asked again")
    func staleReservationReleased() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.reserved(wait: .milliseconds(50), token: 7), now: at(0))
        let answer8 = step(&starts, allowed: 500, now: 500, monitor: .serial)
        #expect(answer8 == .release(7))
        let answer9 = step(&starts, allowed: 500, now: 500, monitor: .serial)
        #expect(answer9 == request(monitor: .serial))
    }

    @Test(".serial: the lease is handed back at the end; a nested start asks holding it")
    func serialTokens() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.reserved(wait: .zero, token: 3), now: at(0))
        starts.started()
        #expect(step(&starts, allowed: 10, now: 10, nested: true, gap: .milliseconds(5), monitor: .serial)
            == request(gap: .milliseconds(5), monitor: .serial, holding: 3))
        _ = starts.answered(.reserved(wait: .zero, token: 3), now: at(10))
        starts.started()
        let answer10 = starts.ended(now: at(20))
        #expect(answer10 == [3])
        let answer11 = starts.ended(now: at(30))
        #expect(answer11 == [3])
    }

    @Test("A reservation left unused when the queue goes idle is given up")
    func giveUp() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.reserved(wait: .milliseconds(50), token: 9), now: at(0))
        let answer12 = starts.giveUpReservation(now: at(1))
        #expect(answer12 == 9)
        let answer13 = starts.giveUpReservation(now: at(2))
        #expect(answer13 == nil)
    }

    @Test(".failClosed: nothing starts until the coordinator may be asked again; the loss and the recovery are reported")
    func failClosed() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0)
        let answer14 = starts.answered(.unavailable(consumed: false, retryIn: .milliseconds(80)), now: at(0))
        #expect(answer14 == .lost(reason: "unavailable"))
        let answer15 = step(&starts, allowed: 0, now: 10)
        #expect(answer15 == .wait(until: at(80)))
        let answer16 = step(&starts, allowed: 0, now: 80)
        #expect(answer16 == request())
        let answer17 = starts.answered(.reserved(wait: .zero, token: nil), now: at(81))
        #expect(answer17 == .regained)
    }

    @Test(".failOpen: the start goes at once, on the local rules only")
    func failOpen() {
        var starts = CoordinatedStarts(policy: .failOpen, asker: 5)
        _ = step(&starts, allowed: 0, now: 0)
        _ = starts.answered(.unavailable(consumed: true, retryIn: .seconds(1)), now: at(3))
        let answer18 = step(&starts, allowed: 0, now: 3)
        #expect(answer18 == .startAt(at(3)))
    }

    @Test(".localFallback: starts at share of the rate, counted from the last coordinated start and from a consumed command")
    func localFallback() {
        var starts = CoordinatedStarts(policy: .localFallback(share: 0.5), asker: 5)
        // A coordinated start at 0 with a 100 ms gap.
        _ = step(&starts, allowed: 0, now: 0)
        _ = starts.answered(.reserved(wait: .zero, token: nil), now: at(0))
        starts.started()
        _ = starts.ended(now: at(1))
        // Unavailable at 100: the fallback's gap is 200 ms from the coordinated start.
        _ = step(&starts, allowed: 100, now: 100)
        _ = starts.answered(.unavailable(consumed: false, retryIn: .seconds(1)), now: at(100))
        let answer19 = step(&starts, allowed: 100, now: 100)
        #expect(answer19 == .startAt(at(200)))
        starts.started()
        _ = starts.ended(now: at(201))
        // A timed-out command at 400 counts as a start: the next fallback start is 200 ms after it.
        _ = step(&starts, allowed: 300, now: 400)
        _ = starts.answered(.unavailable(consumed: true, retryIn: .seconds(1)), now: at(400))
        let answer20 = step(&starts, allowed: 300, now: 400)
        #expect(answer20 == .startAt(at(600)))
    }

    @Test(".localFallback with .serial: the local lease is taken and handed back inside the fallback")
    func localFallbackSerial() {
        var starts = CoordinatedStarts(policy: .localFallback(share: 0.5), asker: 5)
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.unavailable(consumed: false, retryIn: .seconds(1)), now: at(0))
        let answer21 = step(&starts, allowed: 0, now: 0, monitor: .serial)
        #expect(answer21 == .startAt(at(0)))
        starts.started()
        #expect(starts.fallback.lease != nil)
        let answer22 = starts.ended(now: at(50))
        #expect(answer22.isEmpty)
        #expect(starts.fallback.lease == nil)
        // The next: 200 ms after that end.
        _ = step(&starts, allowed: 150, now: 150, monitor: .serial)
        _ = starts.answered(.unavailable(consumed: false, retryIn: .seconds(1)), now: at(150))
        let answer23 = step(&starts, allowed: 150, now: 150, monitor: .serial)
        #expect(answer23 == .startAt(at(250)))
    }

    // MARK: - Step 2

    @Test("A reservation reached more than its lateness allowance after its time is given up, its lease handed back, and asked again")
    func lateReservationGivenUp() {
        #expect(CoordinatedStarts.latenessAllowance(gap: .milliseconds(100)) == .milliseconds(10))
        #expect(CoordinatedStarts.latenessAllowance(gap: .milliseconds(5)) == .milliseconds(1))
        #expect(CoordinatedStarts.latenessAllowance(gap: .zero) == .milliseconds(1))
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0)
        _ = starts.answered(.reserved(wait: .milliseconds(50), token: nil), now: at(0))
        // Exactly the allowance late: still started, at its time.
        var onTime = starts
        let withinAllowance = step(&onTime, allowed: 0, now: 60)
        #expect(withinAllowance == .startAt(at(50)))
        // Later: given up (it stays counted on the coordinator), and a new one asked for.
        let late = step(&starts, allowed: 0, now: 61)
        #expect(late == request())
        #expect(starts.reservation == nil)
        // A late .serial reservation hands its lease back first.
        var serial = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&serial, allowed: 0, now: 0, monitor: .serial)
        _ = serial.answered(.reserved(wait: .milliseconds(50), token: 4), now: at(0))
        let lateSerial = step(&serial, allowed: 0, now: 70, monitor: .serial)
        #expect(lateSerial == .release(4))
        let askedAgain = step(&serial, allowed: 0, now: 70, monitor: .serial)
        #expect(askedAgain == request(monitor: .serial))
    }

    @Test("Each reservation given up late in a row doubles the allowance (up to 64 times), so a loaded process still starts; a start resets it")
    func latenessAllowanceGrows() {
        #expect(CoordinatedStarts.latenessAllowance(gap: .milliseconds(100), lateInARow: 1) == .milliseconds(20))
        #expect(CoordinatedStarts.latenessAllowance(gap: .milliseconds(100), lateInARow: 6) == .milliseconds(640))
        #expect(CoordinatedStarts.latenessAllowance(gap: .milliseconds(100), lateInARow: 60) == .milliseconds(640))
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        // Woken 15 ms late each time (a loaded machine), with a 10 ms allowance.
        _ = step(&starts, allowed: 0, now: 0)
        _ = starts.answered(.reserved(wait: .milliseconds(50), token: nil), now: at(0))
        #expect(step(&starts, allowed: 0, now: 65) == request())
        #expect(starts.lateInARow == 1)
        _ = starts.answered(.reserved(wait: .milliseconds(85), token: nil), now: at(65))
        // 15 ms late is within the doubled 20 ms: started.
        #expect(step(&starts, allowed: 0, now: 165) == .startAt(at(150)))
        starts.started()
        #expect(starts.lateInARow == 0)
    }

    @Test("A reservation carries the gap it was asked with; one asked with another gap than the next task's is given up")
    func reservationCarriesItsGap() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0, gap: .milliseconds(100))
        _ = starts.answered(.reserved(wait: .milliseconds(20), token: nil), now: at(0))
        #expect(starts.reservation?.gap == .milliseconds(100))
        // The interval changed to 300 ms meanwhile: the coordinator must hear of the new gap.
        let changed = step(&starts, allowed: 0, now: 5, gap: .milliseconds(300))
        #expect(changed == request(gap: .milliseconds(300)))
    }

    @Test("A start nested in a coordinated task running inside a fallback task asks the fallback holding the fallback's lease")
    func nestedFallbackHoldsInnermostLocalLease() {
        var starts = CoordinatedStarts(policy: .localFallback(share: 0.5), asker: 5)
        // Redis down: the outer task starts on the fallback's lease.
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.unavailable(consumed: false, retryIn: .milliseconds(40)), now: at(0))
        #expect(step(&starts, allowed: 0, now: 0, monitor: .serial) == .startAt(at(0)))
        starts.started()
        // Redis back: a nested start is coordinated (the shared state has no lease of this process).
        let nested = step(&starts, allowed: 10, now: 10, nested: true, gap: .milliseconds(5), monitor: .serial)
        #expect(nested == request(gap: .milliseconds(5), monitor: .serial, holding: nil))
        _ = starts.answered(.reserved(wait: .zero, token: 8), now: at(10))
        starts.started()
        // The queue proposes the fallback's tokens, counting from 1.
        let localToken: UInt64 = 1
        #expect(starts.running == [.local(localToken), .shared(8)])
        // Redis down again, for a start nested in the coordinated one: it holds the shared lease
        // towards the coordinator and the fallback's own lease towards the fallback.
        let inner = step(&starts, allowed: 20, now: 20, nested: true, gap: .milliseconds(5), monitor: .serial)
        #expect(inner == request(gap: .milliseconds(5), monitor: .serial, holding: 8))
        _ = starts.answered(.unavailable(consumed: false, retryIn: .milliseconds(40)), now: at(20))
        let fallbackStart = step(&starts, allowed: 20, now: 20, nested: true, gap: .milliseconds(5), monitor: .serial)
        #expect(fallbackStart == .startAt(at(20)))
    }

    @Test("A fallback decline is asked again no later than the coordinator may answer again")
    func fallbackDeclineCappedByCoordinatorRetry() {
        var starts = CoordinatedStarts(policy: .localFallback(share: 0.5), asker: 5)
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.unavailable(consumed: false, retryIn: .milliseconds(40)), now: at(0))
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        starts.started()
        // Not nested (another caller's start while the fallback's lease runs): the fallback declines
        // for one poll (20 ms: its lease lasts until its task ends), but the coordinator may be asked
        // again after 10 ms.
        _ = step(&starts, allowed: 1, now: 1, monitor: .serial)
        _ = starts.answered(.unavailable(consumed: false, retryIn: .milliseconds(10)), now: at(1))
        #expect(starts.askAfter == at(11))
    }

    @Test("A nested reservation left unused when its holder ends is given up with the holder's lease")
    func nestedReservationGivenUpAtHolderEnd() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&starts, allowed: 0, now: 0, monitor: .serial)
        _ = starts.answered(.reserved(wait: .zero, token: 3), now: at(0))
        starts.started()
        _ = step(&starts, allowed: 10, now: 10, nested: true, gap: .milliseconds(5), monitor: .serial)
        _ = starts.answered(.reserved(wait: .milliseconds(30), token: 3), now: at(10))
        // The nested `run` is cancelled; its holder ends: both starts' leases go back.
        let leases = starts.ended(now: at(20))
        #expect(leases == [3, 3])
        #expect(starts.reservation == nil)
    }

    @Test("A rules mismatch is logged with its reason and handled like an unavailable coordinator, by the policy")
    func mismatch() {
        var closed = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = step(&closed, allowed: 0, now: 0)
        let lost = closed.answered(.mismatch(reason: "the key is .serial"), now: at(0))
        #expect(lost == .lost(reason: "the key is .serial"))
        #expect(step(&closed, allowed: 0, now: 1) == .wait(until: at(1_000)))
        var fallback = CoordinatedStarts(policy: .localFallback(share: 0.5), asker: 5)
        _ = step(&fallback, allowed: 0, now: 0)
        _ = fallback.answered(.mismatch(reason: "the key is .serial"), now: at(0))
        #expect(step(&fallback, allowed: 0, now: 0) == .startAt(at(0)))
    }
}

