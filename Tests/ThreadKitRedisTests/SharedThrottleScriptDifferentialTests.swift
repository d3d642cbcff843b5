import SeededRandom
import Testing
import ThreadKit
@testable import ThreadKitRedis

/// The Lua script against the Swift model: the same seeded random runs of several made-up processes
/// go through the script on a real server and through ThreadKit's `SharedThrottle` itself, and every
/// answer and the whole stored state (the state with its `.serial` line, and the log) must be the
/// same after every call.
@Suite("The shared throttle script decides exactly as the Swift model", .needsRedisServer,
       .timeLimit(.minutes(2)))
struct SharedThrottleScriptDifferentialTests {
    /// A made-up process: its place in the `.serial` line, when it acts next, the `.serial` tokens
    /// it holds (one per running start, nested ones included), the ends it numbered per token, and
    /// tokens of leases it lost (crashed, expired under it, or a reserve whose reply it never saw).
    struct Client {
        var asker: UInt64
        var next: Int64
        var held: [UInt64] = []
        var ends: [UInt64: Int64] = [:]
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

    @Test("Several processes: reserves, nested starts, numbered ends sent again, crashes and expiries, lost replies, declines, the line, pauses, mismatches, a clock stepping back",
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
            try await Self.run(seed: seed, on: server, random: &random, monitor: monitor, limit: limit, horizon: horizon, leaseTTL: leaseTTL)
        }
    }

    /// One seed's run of ``sameAnswersAndState(seed:)`` on `server`.
    static func run(
        seed: UInt64, on server: RedisServer, random: inout SplitMix64, monitor: ThrottledQueue.Monitor,
        limit: SharedThrottleCall.Limit?, horizon: Int64, leaseTTL: Int64
    ) async throws {
        let script = ThrottleScriptHarness(server, key: "diff-\(seed)")
        var model = SharedThrottle()
        var clients: [Client] = []
        for asker in 1...UInt64(random.weighted([2: 1, 3: 1, 5: 1])) {
            clients.append(Client(asker: asker, next: 1_000_000 + Int64(random.next() % 500)))
        }
        var counts: [String: Int] = [:]
        var configured = false
        // The largest count asked for: a call with other rules stores them when the state was dropped.
        var mostAsked = limit?.count ?? 0
        var mismatches = 0   // each kind in turn
        for event in 0..<600 {
            // Now and then the whole fleet goes idle longer than anything binds: the state is dropped.
            if random.chance(0.01) {
                for index in clients.indices { clients[index].next += 500_000 }
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
            } else if !client.held.isEmpty && random.chance(0.1) {
                operation = .renew(token: client.held.last!, leaseTTL: Int64(random.weighted([1_000: 1, 8_000: 1])))
            } else if !client.held.isEmpty && random.chance(0.5) {
                let token = client.held.last!
                let sent = client.ends[token] ?? 0
                if sent > 0 && random.chance(0.15) {
                    // Its last end's reply was lost: sent again.
                    counts["end sent again", default: 0] += 1
                    operation = .finished(token: token, number: sent)
                } else {
                    client.held.removeLast()
                    client.ends[token] = sent + 1
                    operation = .finished(token: token, number: sent + 1)
                }
            } else if !client.held.isEmpty && random.chance(0.06) {
                // It crashes: its starts never report their ends; it will hand back a token late.
                client.lost += client.held
                client.held = []
                client.next = earliest + leaseTTL + Int64(random.weighted([0: 1, 300: 1]))
                clients[index] = client
                continue
            } else if !client.lost.isEmpty && random.chance(0.1) {
                let lost = client.lost.randomElement(using: &random)!
                operation = .finished(token: lost, number: Int64(random.weighted([1: 3, 2: 1])))
            } else {
                let holding = client.held.last.flatMap { random.chance(0.7) ? $0 : nil }
                operation = .reserve(
                    gap: gap, monitor: askedMonitor, limit: askedLimit, horizon: horizon, leaseTTL: leaseTTL, holding: holding,
                    token: 1_000_000 + UInt64(event), asker: client.asker)
            }
            switch operation {
            case .reserve: configured = true
            case .finished, .renew, .pause: break
            }
            let stateDropped = model.expiry.map { $0 <= max(now, model.lastNow ?? now) } ?? false
            if stateDropped { counts["state dropped", default: 0] += 1 }
            let waitingBefore = Set(model.waiters.map(\.asker))
            let call = SharedThrottleCall(operation, now: now)
            let answer = try await call.run(on: script.client, keys: script.keys)
            let expected = model.apply(call)
            // A waiter left the line without being granted the lease, the state kept: dropped alone.
            var granted: UInt64?
            if case .reserve(_, _, _, _, _, _, _, let asker) = operation, case .decision(.reserved) = expected { granted = asker }
            if !stateDropped, !waitingBefore.subtracting(model.waiters.map(\.asker)).subtracting([granted].compactMap { $0 }).isEmpty {
                counts["waiter dropped", default: 0] += 1
            }
            #expect(answer == expected, "seed \(seed) event \(event): \(operation) at \(now)")
            let stored = try await script.stored()
            #expect(stored.fields == model.expectedFields, "seed \(seed) event \(event): \(operation) at \(now)")
            #expect(stored.log == model.log, "seed \(seed) event \(event)")
            if !model.waiters.isEmpty { counts["in line", default: 0] += 1 }
            #expect(stored.stateTTL > 0 && (stored.logTTL > 0 || stored.logTTL == -2), "seed \(seed) event \(event): \(stored)")
            #expect(stored.log.count <= mostAsked)
            guard answer == expected else { return }

            var step = Int64(random.weighted([0: 2, 50: 1, 400: 1]))
            let replyLost = random.chance(0.08)
            switch answer {
            case .decision(.reserved(let at, _, let token?)):
                let nested = client.held.contains(token)
                if replyLost && !nested {
                    // Its reply is lost: it hands the token it proposed back later.
                    counts["reply lost", default: 0] += 1
                    client.lost.append(token)
                } else {
                    counts[nested ? "nested" : "reserved", default: 0] += 1
                    if !nested {
                        // A new lease: any it held before had expired under it.
                        client.lost += client.held
                        client.held = []
                    }
                    client.held.append(token)
                    step = at - earliest + Int64(random.weighted([0: 1, 200: 2, 1_500: 1, 7_000: 1]))
                }
            case .decision(.reserved(let at, _, nil)):
                counts["reserved", default: 0] += 1
                step = at - earliest + step
            case .decision(.declined(let retryIn)):
                counts["declined", default: 0] += 1
                if monitor == .serial && random.chance(0.08) {
                    // It goes silent past its retry and the grace (its queue emptied, its process
                    // hangs) while the others keep the state alive: the line drops it alone.
                    counts["silent waiter", default: 0] += 1
                    step = retryIn + SharedThrottle.waiterGrace + Int64(random.weighted([0: 1, 1: 1, 3_000: 1]))
                } else if random.chance(0.7) {
                    step = retryIn
                }
            case .decision(.mismatch): counts["mismatch", default: 0] += 1
            case .finished(let accepted): counts[accepted ? "finished" : "stale finish", default: 0] += 1
            case .renewed(let accepted): counts[accepted ? "renewed" : "stale renewal", default: 0] += 1
            case .paused: counts["paused", default: 0] += 1
            }
            client.next = earliest + max(step, 0)
            clients[index] = client
        }
        // Every kind of step happened.
        #expect(counts["reserved", default: 0] > 25, "\(counts)")
        #expect(counts["paused", default: 0] > 0 && counts["mismatch", default: 0] > 0, "\(counts)")
        if monitor == .serial {
            #expect(counts["finished", default: 0] > 0 && counts["stale finish", default: 0] > 0 && counts["nested", default: 0] > 0 && counts["renewed", default: 0] > 0, "\(counts)")
            #expect(counts["in line", default: 0] > 0 && counts["end sent again", default: 0] > 0 && counts["reply lost", default: 0] > 0, "\(counts)")
            #expect(counts["waiter dropped", default: 0] > 0, "\(counts)")
        }
        #expect(counts["declined", default: 0] > 0 || horizon == 100_000, "\(counts)")
        #expect(counts["state dropped", default: 0] > 0, "\(counts)")
        #expect(["monitor", "count", "window"].allSatisfy { counts["asked with another \($0)", default: 0] > 0 }, "\(counts)")
        print("differential seed \(seed) (\(monitor), \(String(describing: limit)), horizon \(horizon)): \(counts.sorted { $0.key < $1.key })")
    }
}
