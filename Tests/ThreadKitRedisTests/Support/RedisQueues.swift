// Queues coordinated on a test's own redis-server, and what their coordinators answered.

import Testing
import ThreadKit
import ThreadKitTestSupport
@testable import ThreadKitRedis

/// Every answer the coordinators of a test gave, with the reserved start on Redis's clock.
final class CoordinatorAnswers: Sendable {
    private let recorded = LockedValue<[(queue: String, answer: CoordinatorAnswer, reservedAt: Int64?)]>([])

    func append(_ queue: String, _ answer: CoordinatorAnswer, _ reservedAt: Int64?) {
        recorded.withLock { $0.append((queue, answer, reservedAt)) }
    }

    var all: [(queue: String, answer: CoordinatorAnswer, reservedAt: Int64?)] { recorded.value }
    /// The reserved starts on Redis's clock, in microseconds, in the order answered.
    var reservations: [Int64] { all.compactMap(\.reservedAt) }
    /// How many answers said Redis could not decide, by whether they counted as consumed.
    func unavailable(consumed: Bool) -> Int {
        all.filter { if case .unavailable(consumed, _) = $0.answer { true } else { false } }.count
    }
}

/// A queue whose starts the Redis coordinator of `client` decides for `key`, its answers recorded.
func redisQueue(
    _ label: String, client: RedisClient, key: String, interval: Duration, monitor: ThrottledQueue.Monitor = .concurrent,
    limit: RateLimit? = nil, whenUnavailable: Fallback = .standard, horizon: Duration = RedisStartCoordinator.defaultHorizon,
    leaseTTL: Duration = RedisStartCoordinator.defaultLeaseTTL, answers: CoordinatorAnswers
) -> ThrottledQueue {
    let coordinator = RedisStartCoordinator(
        client: client, keys: RedisLimitKeys(key), horizon: horizon, leaseTTL: leaseTTL,
        observe: { answers.append(label, $0, $1) })
    return ThrottledQueue(
        label: label, interval: interval, monitor: monitor, limit: limit,
        coordination: Coordination(coordinator: coordinator, whenUnavailable: whenUnavailable))
}

/// Waits until every queue is idle, for at most `limit`; whether they all were.
func waitUntilIdle(_ queues: [ThrottledQueue], limit: Duration = .seconds(20)) async -> Bool {
    let deadline = ContinuousClock.now + limit
    for queue in queues {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { return false }
        let idle = await cancelling(after: left) { () async -> Bool in
            await queue.waitUntilIdle()
            return !Task.isCancelled
        }
        if !idle { return false }
    }
    return true
}

/// Checks the shared rules on `reservations` (Redis's clock, µs): no two closer than `gap`, at most
/// `count` in any window of `window`.
func expectSharedRules(
    _ reservations: [Int64], gap: Duration, limit: (count: Int, window: Duration)? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let sorted = reservations.sorted()
    let gapMicroseconds = gap.microsecondsRoundedUp
    for (earlier, later) in zip(sorted, sorted.dropFirst()) where later - earlier < gapMicroseconds {
        Issue.record("reservations \(earlier) and \(later) are \(later - earlier) µs apart, closer than the gap", sourceLocation: sourceLocation)
    }
    guard let limit, sorted.count > limit.count else { return }
    let window = limit.window.microsecondsRoundedUp
    for index in limit.count..<sorted.count where sorted[index] - sorted[index - limit.count] < window {
        Issue.record("\(limit.count + 1) reservations within \(sorted[index] - sorted[index - limit.count]) µs, less than the window", sourceLocation: sourceLocation)
    }
}

/// Runs one task after another on `queue` until one is reserved on Redis (its breaker may still be
/// backing off after an outage), for at most `limit`; whether one was.
func coordinatedAgain(_ queue: ThrottledQueue, _ answers: CoordinatorAnswers, limit: Duration = .seconds(10)) async -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        let answered = answers.all.count
        guard (try? queue.async {}) != nil, await waitUntilIdle([queue], limit: deadline - ContinuousClock.now) else { return false }
        if answers.all.dropFirst(answered).contains(where: { $0.reservedAt != nil }) { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return false
}
