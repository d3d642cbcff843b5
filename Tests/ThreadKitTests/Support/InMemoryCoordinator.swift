import Foundation
@testable import ThreadKit
import SeededRandom

/// A start coordinator in memory, standing in for Redis: one ``SharedThrottle`` on the monotonic
/// clock in microseconds, shared by several queues (standing in for processes) through a
/// ``Client`` each, behind a circuit breaker, and made to fail on demand.
final class InMemoryCoordinator: @unchecked Sendable {
    // Sendable: every var is guarded by `lock`.
    private let lock = NSLock()
    private var model = SharedThrottle()
    private var breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .milliseconds(40), maxBackoff: .milliseconds(80))
    private var random = SplitMix64(seed: 24)
    private var recorded: [(client: String, at: Int64)] = []
    private var failing: Failure?
    private var hold: Latch?
    private var blockedCalls = 0
    let horizon: Int64
    let leaseTTL: Int64

    /// How the coordinator fails: refused at once, or after a timeout with the command sent.
    enum Failure {
        case refused
        case timeout(after: Duration)
    }

    init(horizon: Duration = .milliseconds(50), leaseTTL: Duration = .seconds(5)) {
        self.horizon = horizon.microsecondsRoundedUp
        self.leaseTTL = leaseTTL.microsecondsRoundedUp
    }

    /// A process's view of the coordinator, for one queue.
    final class Client: StartCoordinator {
        let shared: InMemoryCoordinator
        let name: String
        init(_ shared: InMemoryCoordinator, name: String) {
            self.shared = shared
            self.name = name
        }
        func reserve(_ request: CoordinatedRequest) -> CoordinatorAnswer { shared.reserve(request, client: name) }
        /// Ends reach the model in order, one by one: each is the next number of its lease.
        func finished(token: UInt64) {
            _ = shared.locked { $0.model.finished(token: token, number: ($0.model.lease?.ends ?? 0) + 1, now: Self.now()) }
        }
        func pause(for duration: Duration) {
            _ = shared.locked { $0.model.pause(for: duration.microsecondsRoundedUp, now: Self.now()) }
        }
        static func now() -> Int64 { CoordinatedStarts.microseconds(.now()) }
    }

    func client(_ name: String) -> Client { Client(self, name: name) }

    /// Every reserved start so far, in the order recorded: the client and the instant (µs).
    var reservations: [(client: String, at: Int64)] { locked { $0.recorded } }
    var state: SharedThrottle { locked { $0.model } }
    /// Whether a reservation is being held back (see ``holdReservations()``) right now.
    var isBlocking: Bool { locked { $0.blockedCalls > 0 } }

    /// Makes every later command fail this way; `nil` heals it.
    func fail(_ failure: Failure?) { locked { $0.failing = failure } }
    /// Holds every later reservation's answer back (a slow round trip) until the returned latch is
    /// counted down.
    func holdReservations() -> Latch {
        let latch = Latch()
        locked { $0.hold = latch }
        return latch
    }

    private static func sleep(_ duration: Duration) {
        Thread.sleep(forTimeInterval: Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    private func locked<Result>(_ body: (InMemoryCoordinator) -> Result) -> Result {
        lock.withLock { body(self) }
    }

    private func reserve(_ request: CoordinatedRequest, client: String) -> CoordinatorAnswer {
        lock.lock()
        let now = Client.now()
        let held = hold
        if case .refused(let retryIn) = breaker.permit(now: .microseconds(now)) {
            lock.unlock()
            return .unavailable(consumed: false, retryIn: retryIn)
        }
        if let failing {
            let timedOut: Duration? = if case .timeout(let after) = failing { after } else { nil }
            breaker.failed(now: .microseconds(now), timedOut: timedOut != nil, jitter: Double.random(in: 0..<1, using: &random))
            let retryIn = if case .open(let until, _) = breaker.state { until - .microseconds(now) } else { Duration.zero }
            lock.unlock()
            if let timedOut { Self.sleep(timedOut) }
            return .unavailable(consumed: timedOut != nil, retryIn: retryIn)
        }
        breaker.succeeded()
        let decision = model.request(SharedThrottle.Request(
            now: now, gap: request.gap.microsecondsRoundedUp, monitor: request.monitor,
            limit: request.limitInMicroseconds, horizon: horizon, leaseTTL: leaseTTL, holding: request.holding,
            token: random.next() >> 11 | 1, asker: request.asker))
        if case .reserved(let at, _, _) = decision { recorded.append((client, at)) }
        if held != nil { blockedCalls += 1 }
        lock.unlock()
        if let held {
            _ = held.wait(timeout: .seconds(60))
            lock.withLock { blockedCalls -= 1 }
        }
        // A held answer arrives late, and the queue counts the wait from its arrival: later, never earlier.
        return CoordinatorAnswer(decision) { stored in "the key's rules are \(stored)" }
    }
}
