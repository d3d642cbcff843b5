// The Swift model of the shared start decision with the rules agreed for step 2 of issue 24, as the
// differential test's reference for the Lua script.

import ThreadKit
@testable import ThreadKitRedis

/// ThreadKit's `SharedThrottle` (as on this branch) with the step-2 rules the script implements and
/// that the model gains in parallel (branch coord2), added around it:
///
/// 1. the clock's high-water mark: `now = max(now, lastNow)`;
/// 2. an expired lease is dropped before every operation (not only before a request), its start
///    taken to have ended at the expiry even when a nested start under it ended earlier (the model
///    keeps that earlier end);
/// 3. a decline is asked again no sooner than 1 ms later;
/// 4. the first reserve or consume stores the monitor and limit; a request with others is answered
///    with a mismatch and changes nothing but the clock's mark;
/// 5. a pause that has passed is none (compared as absent).
///
/// Clamping to ±(2⁵³−1) is not mirrored: the differential runs keep every value far below it (the
/// model saturates at `Int64.max` instead), and the script's clamping is tested on its own.
/// When coord2's model lands, rules 2-4 (and the clamp) are in `SharedThrottle` itself and this
/// adapter shrinks to the clock's mark and the passed-pause normalization.
struct AgreedSharedThrottle {
    private(set) var model = SharedThrottle()
    private(set) var lastNow: Int64?
    private(set) var monitor: ThrottledQueue.Monitor?
    private(set) var limit: SharedThrottleCall.Limit?

    /// What the script answers to `call`, whose `now` is set.
    mutating func apply(_ call: SharedThrottleCall) -> SharedThrottleCall.Reply {
        let now = max(call.now!, lastNow ?? call.now!)
        lastNow = now
        if let lease = model.lease, lease.expiry <= now {
            for _ in 0..<lease.running { model.finished(token: lease.token, now: lease.expiry) }
        }
        switch call.operation {
        case .reserve(let gap, let monitor, let limit, let horizon, let leaseTTL, let holding):
            if let mismatch = adopt(monitor, limit) { return mismatch }
            let request = SharedThrottle.Request(
                now: now, gap: gap, monitor: monitor, limit: limit.map { ($0.count, $0.window) }, horizon: horizon,
                leaseTTL: leaseTTL, holding: holding)
            switch model.request(request) {
            case .reserved(let at, let wait, let token): return .reserved(at: at, wait: wait, token: token)
            case .declined(let retryIn): return .declined(retryIn: max(retryIn, 1_000))
            }
        case .finished(let token):
            return .finished(model.finished(token: token, now: now))
        case .pause(let duration):
            model.pause(until: now + duration, now: now)
            return .paused(until: pausedUntil)
        case .recordConsumed(let gap, let monitor, let limit):
            if let mismatch = adopt(monitor, limit) { return mismatch }
            model.recordConsumed(at: now, gap: gap, count: limit?.count)
            return .consumed(at: model.lastStart!)
        }
    }

    /// The pause in force at the clock's mark.
    var pausedUntil: Int64? {
        model.pausedUntil.flatMap { $0 > (lastNow ?? .min) ? $0 : nil }
    }

    /// The hash fields the script should hold, numbers in decimal.
    var expectedFields: [String: String] {
        var fields: [String: String] = ["lastGap": String(model.lastGap)]
        fields["lastNow"] = lastNow.map { String($0) }
        fields["lastStart"] = model.lastStart.map { String($0) }
        fields["lastEnd"] = model.lastEnd.map { String($0) }
        fields["token"] = model.lease.map { String($0.token) }
        fields["expiry"] = model.lease.map { String($0.expiry) }
        fields["running"] = model.lease.map { String($0.running) }
        fields["pausedUntil"] = pausedUntil.map { String($0) }
        fields["lastToken"] = model.lastToken > 0 ? String(model.lastToken) : nil
        fields["monitor"] = monitor.map { $0 == .serial ? "serial" : "concurrent" }
        fields["count"] = monitor.map { _ in String(limit?.count ?? 0) }
        fields["window"] = monitor.map { _ in String(limit?.window ?? 0) }
        return fields
    }

    private mutating func adopt(_ monitor: ThrottledQueue.Monitor, _ limit: SharedThrottleCall.Limit?) -> SharedThrottleCall.Reply? {
        guard let stored = self.monitor else {
            self.monitor = monitor
            self.limit = limit
            return nil
        }
        return stored == monitor && self.limit == limit ? nil : .mismatch(monitor: stored, limit: self.limit)
    }
}
