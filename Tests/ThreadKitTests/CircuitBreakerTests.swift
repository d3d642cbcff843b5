import Testing
@testable import ThreadKit
import SeededRandom

/// The circuit breaker, driven with made-up times (offsets in milliseconds) and given jitter.
@Suite("CircuitBreaker")
struct CircuitBreakerTests {
    func ms(_ value: Int) -> Duration { .milliseconds(value) }

    @Test("A streak of failures opens it; a success in between starts the streak again")
    func streakOpens() {
        var breaker = CircuitBreaker(failureThreshold: 3, baseBackoff: ms(100), maxBackoff: ms(1_000))
        let answer1 = breaker.failed(now: ms(0), timedOut: false, jitter: 0)
        #expect(!answer1)
        let answer2 = breaker.failed(now: ms(1), timedOut: false, jitter: 0)
        #expect(!answer2)
        let answer3 = breaker.succeeded()
        #expect(!answer3)
        let answer4 = breaker.failed(now: ms(2), timedOut: false, jitter: 0)
        #expect(!answer4)
        let answer5 = breaker.failed(now: ms(3), timedOut: false, jitter: 0)
        #expect(!answer5)
        let answer6 = breaker.permit(now: ms(3))
        #expect(answer6 == .allowed)
        let answer7 = breaker.failed(now: ms(4), timedOut: false, jitter: 0)
        #expect(answer7)
        #expect(breaker.state == .open(until: ms(54), openings: 1))
        let answer8 = breaker.permit(now: ms(20))
        #expect(answer8 == .refused(retryIn: ms(34)))
    }

    @Test("A single timeout opens it at once")
    func timeoutOpens() {
        var breaker = CircuitBreaker(failureThreshold: 5, baseBackoff: ms(100), maxBackoff: ms(1_000))
        let answer9 = breaker.failed(now: ms(10), timedOut: true, jitter: 0.5)
        #expect(answer9)
        #expect(breaker.state == .open(until: ms(85), openings: 1))
    }

    @Test("After the back-off one probe goes, the others are refused; its success closes it")
    func probeCloses() {
        var breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: ms(100), maxBackoff: ms(1_000))
        breaker.failed(now: ms(0), timedOut: false, jitter: 0)
        let answer10 = breaker.permit(now: ms(49))
        #expect(answer10 == .refused(retryIn: ms(1)))
        let answer11 = breaker.permit(now: ms(50))
        #expect(answer11 == .probe)
        let answer12 = breaker.permit(now: ms(51))
        #expect(answer12 == .refused(retryIn: ms(99)))
        let answer13 = breaker.succeeded()
        #expect(answer13)
        #expect(breaker.state == .closed(failures: 0))
        let answer14 = breaker.permit(now: ms(52))
        #expect(answer14 == .allowed)
    }

    @Test("A probe whose outcome is never reported counts as failed after one probe timeout: the next command probes again")
    func lostProbeExpires() {
        var breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: ms(50), maxBackoff: ms(1_000), probeTimeout: ms(300))
        breaker.failed(now: ms(0), timedOut: true, jitter: 0)
        let probe = breaker.permit(now: ms(25))
        #expect(probe == .probe)
        #expect(breaker.state == .halfOpen(since: ms(25), openings: 1))
        // While the probe may still be answered: refused, asked again no later than its deadline.
        let waiting = breaker.permit(now: ms(100))
        #expect(waiting == .refused(retryIn: ms(50)))
        let nearDeadline = breaker.permit(now: ms(300))
        #expect(nearDeadline == .refused(retryIn: ms(25)))
        // Its outcome never came: it failed, and the next command is a new probe.
        let again = breaker.permit(now: ms(325))
        #expect(again == .probe)
        #expect(breaker.state == .halfOpen(since: ms(325), openings: 2))
        let refused = breaker.permit(now: ms(326))
        #expect(refused == .refused(retryIn: ms(50)))
        // A failure of the new probe backs off for the third opening; a success closes it.
        breaker.failed(now: ms(330), timedOut: true, jitter: 0)
        #expect(breaker.state == .open(until: ms(430), openings: 3))
        let probeAgain = breaker.permit(now: ms(430))
        #expect(probeAgain == .probe)
        let closed = breaker.succeeded()
        #expect(closed)
        let allowed = breaker.permit(now: ms(431))
        #expect(allowed == .allowed)
    }

    @Test("A failed probe opens it again for twice as long, up to the longest back-off")
    func failedProbeBacksOff() {
        var breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: ms(100), maxBackoff: ms(300))
        breaker.failed(now: ms(0), timedOut: false, jitter: 0.999_999)
        var now = ms(100)
        var expected: [Duration] = [ms(200), ms(300), ms(300)]
        while let full = expected.first {
            expected.removeFirst()
            let answer15 = breaker.permit(now: now)
            #expect(answer15 == .probe)
            let answer16 = breaker.failed(now: now, timedOut: true, jitter: 0)
            #expect(!answer16)
            guard case .open(let until, _) = breaker.state else {
                Issue.record("not open: \(breaker.state)")
                return
            }
            #expect(until - now == full / 2)
            now = until
        }
        // A failure reported while open (a command sent before it opened) changes nothing.
        let open = breaker.state
        let answer17 = breaker.failed(now: now - ms(1), timedOut: true, jitter: 0.3)
        #expect(!answer17)
        #expect(breaker.state == open)
    }

    @Test("The jittered back-off stays in the upper half of the doubled delay", arguments: [1, 2, 3, 8, 60])
    func jitterBounds(openings: Int) {
        let breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: ms(50), maxBackoff: ms(1_000))
        let full = min(ms(1_000), ms(50) * (1 << min(openings - 1, 20)))
        var random = SplitMix64(seed: UInt64(openings))
        for _ in 0..<200 {
            let delay = breaker.backoff(openings: openings, jitter: Double.random(in: 0..<1, using: &random))
            #expect(delay >= full / 2 && delay < full)
        }
        #expect(breaker.backoff(openings: openings, jitter: 0) == full / 2)
    }
}
