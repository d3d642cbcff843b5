import SeededRandom
import Testing
@testable import ThreadKitRedis

/// A random source that always draws the lowest or the highest value, to pin the jitter's edges.
struct EdgeRandom: RandomNumberGenerator {
    var high: Bool
    mutating func next() -> UInt64 { high ? .max : 0 }
}

@Suite("ReconnectBackoff: when a client may connect again, with made-up times")
struct ReconnectBackoffTests {
    @Test("the ceiling doubles from the initial delay after each failure in a row, up to the maximum")
    func ceilings() {
        let backoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .seconds(2))
        let ceilings = (1...10).map { backoff.ceiling(afterFailures: $0) }
        #expect(ceilings == [20, 40, 80, 160, 320, 640, 1280, 2000, 2000, 2000].map { Duration.milliseconds($0) })
        // However many failures, no overflow.
        #expect(backoff.ceiling(afterFailures: 10_000) == .seconds(2))
    }

    @Test("each delay lies between half the ceiling and the ceiling; the injected random picks where")
    func jitterEdges() {
        var low = ReconnectBackoff(initial: .milliseconds(20), maximum: .seconds(2))
        var high = low
        var lowest = EdgeRandom(high: false)
        var highest = EdgeRandom(high: true)
        var lowDelays: [Duration] = []
        var highDelays: [Duration] = []
        for failure in 0..<4 {
            lowDelays.append(low.failed(at: .seconds(failure), reason: "refused", using: &lowest))
            highDelays.append(high.failed(at: .seconds(failure), reason: "refused", using: &highest))
        }
        #expect(lowDelays == [10, 20, 40, 80].map { Duration.milliseconds($0) })
        #expect(highDelays == [20, 40, 80, 160].map { Duration.milliseconds($0) })
        #expect(low.failures == 4 && low.lastFailure == "refused")

        var random = SplitMix64(seed: 24)
        var backoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .seconds(2))
        var delays: Set<Duration> = []
        for failure in 1...200 {
            let delay = backoff.failed(at: .zero, reason: "x", using: &random)
            let ceiling = backoff.ceiling(afterFailures: failure)
            #expect(delay >= ceiling / 2 && delay <= ceiling, "failure \(failure): \(delay) against \(ceiling)")
            delays.insert(delay)
        }
        // Jittered: processes that fail together do not retry together.
        #expect(delays.count > 150)
    }

    @Test("no attempt before the retry time; at and after it one may go ahead")
    func waiting() {
        var backoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .seconds(2))
        #expect(backoff.wait(at: .zero) == nil)
        var highest = EdgeRandom(high: true)
        backoff.failed(at: .seconds(10), reason: "closed", using: &highest)
        #expect(backoff.retryAt == .seconds(10) + .milliseconds(20))
        #expect(backoff.wait(at: .seconds(10)) == .milliseconds(20))
        #expect(backoff.wait(at: .seconds(10) + .milliseconds(15)) == .milliseconds(5))
        #expect(backoff.wait(at: .seconds(10) + .milliseconds(20)) == nil)
        #expect(backoff.wait(at: .seconds(11)) == nil)
    }

    @Test("a success ends the run of failures: the next failure waits the initial ceiling again")
    func successResets() {
        var backoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .seconds(2))
        var highest = EdgeRandom(high: true)
        for _ in 0..<5 { backoff.failed(at: .zero, reason: "x", using: &highest) }
        #expect(backoff.failures == 5)
        backoff.succeeded()
        #expect(backoff.failures == 0 && backoff.retryAt == nil && backoff.lastFailure == nil && backoff.wait(at: .zero) == nil)
        #expect(backoff.failed(at: .zero, reason: "x", using: &highest) == .milliseconds(20))
    }
}
