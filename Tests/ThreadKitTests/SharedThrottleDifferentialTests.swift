import Testing
@testable import ThreadKit
import SeededRandom

/// ``SharedThrottle`` against the local ``ThrottleSchedule`` and against its own rules, over seeded
/// random runs with made-up times in microseconds.
@Suite("SharedThrottle against ThrottleSchedule and under interleaved processes")
struct SharedThrottleDifferentialTests {
    /// One task of a made-up run: when it is submitted, how long it runs, the gap after it, and a
    /// pause (until when) issued as it becomes next.
    struct Task {
        var submitted: Int64
        var duration: Int64
        var gap: Int64
        var pauseUntil: Int64?
    }

    static let origin = MonotonicInstant(nanoseconds: 1_000_000_000_000)

    func instant(_ microseconds: Int64) -> MonotonicInstant {
        Self.origin.advanced(by: .microseconds(microseconds))
    }

    func randomTasks(_ random: inout SplitMix64, count: Int) -> [Task] {
        var submitted: Int64 = 0
        return (0..<count).map { _ in
            submitted += Int64(random.weighted([0: 3, 50: 2, 400: 2, 3_000: 1]))
            return Task(
                submitted: submitted,
                duration: Int64(random.weighted([0: 1, 30: 2, 250: 2, 1_500: 1])),
                gap: Int64(random.weighted([0: 1, 100: 3, 700: 2])),
                pauseUntil: random.chance(0.08) ? Int64(random.weighted([200: 1, 2_000: 1])) : nil)
        }
    }

    /// The starts of one queue, one task at a time in order, as the local schedule decides them.
    func localStarts(_ tasks: [Task], monitor: ThrottledQueue.Monitor, limit: (count: Int, window: Int64)?) -> [Int64] {
        let rateLimit = limit.map { RateLimit.rate($0.count, per: .microseconds($0.window)) }
        var schedule = ThrottleSchedule<Int>(interval: .zero, monitor: monitor, mutability: .none, limit: rateLimit)
        var previousEnd: Int64 = 0
        var starts: [Int64] = []
        for (index, task) in tasks.enumerated() {
            let now = max(task.submitted, previousEnd)
            if let pause = task.pauseUntil { schedule.pause(until: instant(now + pause)) }
            schedule.submit(index, gap: .microseconds(task.gap))
            guard case .startAt(let allowed) = schedule.nextStart() else {
                Issue.record("task \(index) cannot start: \(schedule.nextStart())")
                return starts
            }
            let start = max(instant(now), allowed)
            _ = schedule.start(at: start)
            let startMicroseconds = Self.origin.duration(to: start).microsecondsRoundedUp
            schedule.end(at: instant(startMicroseconds + task.duration))
            previousEnd = startMicroseconds + task.duration
            starts.append(startMicroseconds)
        }
        return starts
    }

    /// The starts of one queue that decides only through the shared model: it asks when its task is
    /// next and nothing of its own runs, retries a decline when told, and starts at the reservation.
    func modelStarts(
        _ tasks: [Task], monitor: ThrottledQueue.Monitor, limit: (count: Int, window: Int64)?, horizon: Int64
    ) -> [Int64] {
        var model = SharedThrottle()
        var previousEnd: Int64 = 0
        var starts: [Int64] = []
        for task in tasks {
            var now = max(task.submitted, previousEnd)
            if let pause = task.pauseUntil { model.pause(for: pause, now: now) }
            while true {
                let request = SharedThrottle.Request(
                    now: now, gap: task.gap, monitor: monitor, limit: limit, horizon: horizon, leaseTTL: 1_000_000,
                    token: UInt64(starts.count + 1), asker: 1)
                switch model.request(request) {
                case .reserved(let at, let wait, let token):
                    #expect(at == now + wait)
                    starts.append(at)
                    previousEnd = at + task.duration
                    if let token {
                        let accepted = model.finished(token: token, number: 1, now: previousEnd)
                        #expect(accepted)
                    }
                case .declined(let retryIn):
                    #expect(retryIn >= SharedThrottle.minimumRetry)
                    now += retryIn
                    continue
                case .mismatch(let stored):
                    Issue.record("one set of rules, yet a mismatch with \(stored)")
                    return starts
                }
                break
            }
        }
        return starts
    }

    @Test("One process deciding through the model starts every task when the local schedule does", arguments: 0..<40)
    func sameStartsAsThrottleSchedule(seed: UInt64) {
        var random = SplitMix64(seed: 0x5EED_0000 + seed)
        let tasks = randomTasks(&random, count: 120)
        let monitor: ThrottledQueue.Monitor = seed % 2 == 0 ? .concurrent : .serial
        let limit: (count: Int, window: Int64)? = seed % 4 < 2 ? nil : (random.weighted([1: 1, 3: 2, 7: 1]), 2_000)
        let horizon = Int64(random.weighted([1_000: 1, 1_300: 1, 1_000_000_000: 2]))
        let local = localStarts(tasks, monitor: monitor, limit: limit)
        let shared = modelStarts(tasks, monitor: monitor, limit: limit, horizon: horizon)
        #expect(local.count == tasks.count)
        #expect(shared == local, "\(monitor), limit \(String(describing: limit)), horizon \(horizon)")
    }

    // MARK: - Several processes

    /// A reserved start as the model recorded it.
    struct Start {
        var client: Int
        var requested: Int64
        /// The event that asked (events at one instant are ordered too).
        var event: Int
        var at: Int64
        /// When it ended, for `.serial`: the end reported, or its lease's expiry if never reported.
        var end: Int64
    }

    /// A made-up process: it asks, waits for its reservation, runs, reports its end, and asks again.
    struct Client {
        enum Phase {
            case asking
            case reserved(Int)
            case running(Int, token: UInt64?, crashes: Bool)
        }
        var phase = Phase.asking
        var next: Int64
    }

    @Test("Interleaved processes: no two starts closer than the gap, never more than N in a window, no start in a pause, bounded state",
          arguments: 0..<60)
    func interleavedProcesses(seed: UInt64) {
        var random = SplitMix64(seed: 0xF1EE_7000 + seed)
        let monitor: ThrottledQueue.Monitor = seed % 3 == 0 ? .serial : .concurrent
        let gap = Int64(random.weighted([0: 1, 100: 2, 1_000: 1]))
        let limit = (count: random.weighted([1: 1, 2: 1, 5: 2]), window: Int64(random.weighted([500: 1, 3_000: 2])))
        let horizon = Int64(random.weighted([1_000: 1, 5_000: 1, 100_000: 1]))
        let leaseTTL: Int64 = 5_000
        var model = SharedThrottle()
        var clients = (0..<random.weighted([2: 1, 4: 2, 8: 1])).map { _ in Client(next: Int64(random.next() % 500)) }
        var starts: [Start] = []
        var pauses: [(event: Int, until: Int64)] = []
        for event in 0..<2_000 {
            // The next event, ties in a random order: the interleaving.
            let earliest = clients.map(\.next).min()!
            let due = clients.indices.filter { clients[$0].next == earliest }
            let index = due[Int(random.next() % UInt64(due.count))]
            let now = earliest
            switch clients[index].phase {
            case .asking:
                if random.chance(0.03) {
                    let until = now + Int64(random.weighted([0: 1, 800: 2, 4_000: 1]))
                    let before = model.pausedUntil
                    model.pause(for: until - now, now: now)
                    if until > now { pauses.append((event, until)) }
                    if let before, before > now { #expect(model.pausedUntil! >= before, "a pause was shortened") }
                }
                let request = SharedThrottle.Request(
                    now: now, gap: gap, monitor: monitor, limit: limit, horizon: horizon, leaseTTL: leaseTTL,
                    token: UInt64(event + 1), asker: UInt64(index + 1))
                let decision = model.request(request)
                if let lease = model.lease { #expect(lease.expiry > now, "an expired lease was kept") }
                switch decision {
                case .reserved(let at, let wait, let token):
                    #expect(at == now + wait && wait <= horizon)
                    starts.append(Start(client: index, requested: now, event: event, at: at, end: token == nil ? at : at + leaseTTL))
                    clients[index].phase = .reserved(starts.count - 1)
                    clients[index].next = at
                    if let token {
                        let crashes = random.chance(0.05)
                        clients[index].phase = .running(starts.count - 1, token: token, crashes: crashes)
                        clients[index].next = at + Int64(random.weighted([0: 1, 200: 2, 1_500: 1]))
                        if crashes { clients[index].next = at + leaseTTL + 1 }
                    }
                case .declined(let retryIn):
                    #expect(retryIn >= SharedThrottle.minimumRetry)
                    clients[index].next = now + retryIn
                case .mismatch(let stored):
                    Issue.record("one set of rules, yet a mismatch with \(stored)")
                    return
                }
            case .reserved:
                // `.concurrent`: it starts at its reservation and may ask again at once.
                clients[index].phase = .asking
                clients[index].next = now + Int64(random.weighted([0: 2, 100: 1]))
            case .running(let start, let token, let crashes):
                if !crashes, let token {
                    let accepted = model.finished(token: token, number: 1, now: now)
                    #expect(accepted)
                    starts[start].end = now
                }
                clients[index].phase = .asking
                clients[index].next = now + Int64(random.weighted([0: 2, 100: 1]))
            }
            #expect(model.log.count <= limit.count)
        }
        #expect(starts.count > 20)
        for (index, start) in starts.enumerated() {
            if index > 0 {
                let previous = starts[index - 1]
                switch monitor {
                case .concurrent: #expect(start.at >= previous.at + gap, "starts \(index - 1) and \(index) closer than the gap")
                case .serial: #expect(start.at >= previous.end + gap, "start \(index) less than the gap after the end before it")
                }
            }
            if index >= limit.count {
                #expect(start.at >= starts[index - limit.count].at + limit.window, "more than \(limit.count) starts in a window")
            }
            for pause in pauses where pause.event <= start.event {
                #expect(start.at >= pause.until, "start \(index) in a pause")
            }
        }
    }
}
