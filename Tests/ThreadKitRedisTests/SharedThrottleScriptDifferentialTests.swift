import SeededRandom
import Testing
import ThreadKit
@testable import ThreadKitRedis

/// The Lua script against the Swift model: the same seeded random runs of several made-up processes
/// go through the script on a real server and through ThreadKit's `SharedThrottle` itself, and every
/// answer and the whole stored state (the hash, the log, the token counter) must be the same after
/// every call.
@Suite("The shared throttle script decides exactly as the Swift model", .needsRedisServer,
       .timeLimit(.minutes(2)))
struct SharedThrottleScriptDifferentialTests {
    /// A made-up process: when it acts next, the `.serial` tokens it holds (one per running start,
    /// nested ones included) and tokens of leases it lost (crashed, or expired under it).
    struct Client {
        var next: Int64
        var held: [UInt64] = []
        var lost: [UInt64] = []
    }

    /// `limit` with another `field` ("count" or "window"; a limit where none is stored), or itself.
    static func limit(_ limit: SharedThrottleCall.Limit?, changing field: String?) -> SharedThrottleCall.Limit? {
        switch field {
        case "count": SharedThrottleCall.Limit(count: (limit?.count ?? 0) + 1, window: limit?.window ?? 800)
        case "window": SharedThrottleCall.Limit(count: limit?.count ?? 3, window: (limit?.window ?? 2_000) * 2)
        default: limit
        }
    }

    @Test("Several processes: reserves, nested starts, finishes, crashes and expiries, declines, pauses, consumed starts, mismatches, a clock stepping back",
          arguments: 0..<32)
    func sameAnswersAndState(seed: UInt64) async throws {
        var random = SplitMix64(seed: 0xD1FF_0000 + seed)
        let monitor: ThrottledQueue.Monitor = seed % 2 == 0 ? .serial : .concurrent
        let limit: SharedThrottleCall.Limit? = seed % 4 < 2
            ? SharedThrottleCall.Limit(count: random.weighted([1: 1, 3: 2, 6: 1]), window: Int64(random.weighted([800: 1, 4_000: 2])))
            : nil
        let horizon = Int64(random.weighted([300: 1, 2_000: 1, 100_000: 1]))
        let leaseTTL: Int64 = 5_000
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server, key: "diff-\(seed)")
            var model = SharedThrottle()
            var clients = (0..<random.weighted([2: 1, 3: 1, 5: 1])).map { _ in Client(next: 1_000_000 + Int64(random.next() % 500)) }
            var counts: [String: Int] = [:]
            var configured = false
            // The largest count asked for: a call with other rules stores them when the state was dropped.
            var mostAsked = limit?.count ?? 0
            var mismatches = 0   // each kind in turn
            for event in 0..<600 {
                // Now and then the whole fleet goes idle longer than anything binds: the state is dropped.
                if random.chance(0.01) {
                    for index in clients.indices { clients[index].next += 60_000 }
                }
                let earliest = clients.map(\.next).min()!
                let due = clients.indices.filter { clients[$0].next == earliest }
                let index = due[Int(random.next() % UInt64(due.count))]
                // Now and then the process's clock reads behind the last one seen.
                let now = random.chance(0.04) ? earliest - Int64(random.weighted([100: 1, 3_000: 1])) : earliest
                let gap = Int64(random.weighted([0: 1, 100: 3, 700: 2]))
                // A process with other rules (another monitor, count or window: the three fields the
                // script compares), once the limit's own have been stored by the first start.
                let mismatch: String? = configured && random.chance(0.03) ? ["monitor", "count", "window"][mismatches % 3] : nil
                let askedMonitor: ThrottledQueue.Monitor = mismatch == "monitor" ? (monitor == .serial ? .concurrent : .serial) : monitor
                let askedLimit = Self.limit(limit, changing: mismatch)
                mostAsked = max(mostAsked, askedLimit?.count ?? 0)
                if let mismatch {
                    mismatches += 1
                    counts["asked with another \(mismatch)", default: 0] += 1
                }
                var client = clients[index]
                let operation: SharedThrottleCall.Operation
                if random.chance(0.04) {
                    operation = .pause(duration: Int64(random.weighted([-500: 1, 0: 1, 800: 2, 5_000: 1])))
                } else if random.chance(0.03) {
                    operation = .recordConsumed(gap: gap, monitor: askedMonitor, limit: askedLimit)
                } else if !client.held.isEmpty && random.chance(0.1) {
                    operation = .renew(token: client.held.last!, leaseTTL: Int64(random.weighted([1_000: 1, 8_000: 1])))
                } else if !client.held.isEmpty && random.chance(0.5) {
                    operation = .finished(token: client.held.removeLast())
                } else if !client.held.isEmpty && random.chance(0.06) {
                    // It crashes: its starts never report their ends; it will hand back a token late.
                    client.lost += client.held
                    client.held = []
                    client.next = earliest + leaseTTL + Int64(random.weighted([0: 1, 300: 1]))
                    clients[index] = client
                    continue
                } else if !client.lost.isEmpty && random.chance(0.1) {
                    operation = .finished(token: client.lost.randomElement(using: &random)!)
                } else {
                    let holding = client.held.last.flatMap { random.chance(0.7) ? $0 : nil }
                    operation = .reserve(gap: gap, monitor: askedMonitor, limit: askedLimit, horizon: horizon, leaseTTL: leaseTTL, holding: holding)
                }
                switch operation {
                case .reserve, .recordConsumed: configured = true
                case .finished, .renew, .pause: break
                }
                if let expiry = model.expiry, expiry <= max(now, model.lastNow ?? now) { counts["state dropped", default: 0] += 1 }
                let call = SharedThrottleCall(operation, now: now)
                let answer = try await call.run(on: script.client, keys: script.keys)
                let expected = model.apply(call)
                #expect(answer == expected, "seed \(seed) event \(event): \(operation) at \(now)")
                let stored = try await script.stored()
                #expect(stored.fields == model.expectedFields, "seed \(seed) event \(event): \(operation) at \(now)")
                #expect(stored.log == model.log, "seed \(seed) event \(event)")
                #expect(stored.lastToken == (model.lastToken == 0 ? nil : model.lastToken), "seed \(seed) event \(event)")
                #expect(stored.stateTTL > 0 && (stored.logTTL > 0 || stored.logTTL == -2), "seed \(seed) event \(event): \(stored)")
                #expect(stored.log.count <= mostAsked)
                guard answer == expected else { return }

                var step = Int64(random.weighted([0: 2, 50: 1, 400: 1]))
                switch answer {
                case .decision(.reserved(let at, _, let token?)):
                    counts["reserved", default: 0] += 1
                    if client.held.contains(token) { counts["nested", default: 0] += 1 }
                    if !client.held.contains(token) {
                        // A new lease: any it held before had expired under it.
                        client.lost += client.held
                        client.held = []
                    }
                    client.held.append(token)
                    step = at - earliest + Int64(random.weighted([0: 1, 200: 2, 1_500: 1, 7_000: 1]))
                case .decision(.reserved(let at, _, nil)):
                    counts["reserved", default: 0] += 1
                    step = at - earliest + step
                case .decision(.declined(let retryIn)):
                    counts["declined", default: 0] += 1
                    if random.chance(0.7) { step = retryIn }
                case .decision(.mismatch), .consumed(false): counts["mismatch", default: 0] += 1
                case .finished(let accepted): counts[accepted ? "finished" : "stale finish", default: 0] += 1
                case .renewed(let accepted): counts[accepted ? "renewed" : "stale renewal", default: 0] += 1
                case .paused: counts["paused", default: 0] += 1
                case .consumed(true): counts["consumed", default: 0] += 1
                }
                client.next = earliest + max(step, 0)
                clients[index] = client
            }
            // Every kind of step happened.
            #expect(counts["reserved", default: 0] > 25, "\(counts)")
            #expect(counts["paused", default: 0] > 0 && counts["consumed", default: 0] > 0 && counts["mismatch", default: 0] > 0, "\(counts)")
            if monitor == .serial {
                #expect(counts["finished", default: 0] > 0 && counts["stale finish", default: 0] > 0 && counts["nested", default: 0] > 0 && counts["renewed", default: 0] > 0, "\(counts)")
            }
            #expect(counts["declined", default: 0] > 0 || horizon == 100_000, "\(counts)")
            #expect(counts["state dropped", default: 0] > 0, "\(counts)")
            #expect(["monitor", "count", "window"].allSatisfy { counts["asked with another \($0)", default: 0] > 0 }, "\(counts)")
            print("differential seed \(seed) (\(monitor), \(String(describing: limit)), horizon \(horizon)): \(counts.sorted { $0.key < $1.key })")
        }
    }
}
