// timer.fire and timer.pending: ThreadKit's TimerThread against GCD's asyncAfter and one
// DispatchSourceTimer per call.
import Dispatch
import Foundation
import ThreadKit
import SeededRandom
import ToolHarness

/// A way to run a closure once, after a delay counted from the call.
protocol OneShotScheduler: Sendable {
    func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) throws
}

extension OneShotScheduler {
    /// Runs `work` once at `deadline`: the delay from now, read just before the call.
    func schedule(at deadline: ContinuousClock.Instant, _ work: @escaping @Sendable () -> Void) throws {
        try schedule(after: max(deadline - .now, .zero), work)
    }
}

/// `TimerThread.schedule(after:_:)`.
struct ThreadKitTimer: OneShotScheduler {
    let timer: TimerThread
    func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) throws {
        try timer.schedule(after: delay, work)
    }
}

/// `DispatchQueue.global().asyncAfter(deadline:execute:)`.
struct GCDAsyncAfter: OneShotScheduler {
    let queue = DispatchQueue.global()
    func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: work)
    }
}

/// One `DispatchSource.makeTimerSource` per call: `schedule(deadline:)` (no repeat, default leeway),
/// `setEventHandler`, `resume()`; the handler cancels its one-shot source, which releases it.
struct GCDTimerSource: OneShotScheduler {
    let queue = DispatchQueue.global()
    func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + delay.dispatchInterval)
        source.setEventHandler {
            work()
            source.cancel()
        }
        source.resume()
    }
}

/// The timer workloads: lateness of one-shot calls (empty, working, all due at once), the cost of
/// many pending calls, scheduling from four threads, and a repeating call's drift.
enum TimerWorkloads {
    static let fireMetrics = Metric.percentiles("lateness") + [
        Metric(name: "process CPU", unit: "ms"),
        Metric(name: "early calls", unit: "count"),
    ]

    /// The three ways to run a call later, each with a warm-up of a thousand calls over 20 ms.
    static func fireContenders(_ measure: @escaping (any OneShotScheduler) throws -> Measurement) -> [Contender] {
        let warmUpDelays = (0..<1_000).map { Duration.microseconds($0 * 20) }
        let schedulers: [(String, any OneShotScheduler)] = [
            ("ThreadKit", ThreadKitTimer(timer: .shared)),
            ("GCD asyncAfter", GCDAsyncAfter()),
            ("DispatchSourceTimer", GCDTimerSource()),
        ]
        return schedulers.map { name, scheduler in
            Contender(
                name: name,
                warmUp: { _ = try measureFire(scheduler, delays: warmUpDelays) },
                run: { try measure(scheduler) })
        }
    }

    /// The seed of `timer.fire`'s delays.
    static let fireSeed: UInt64 = 0x7153_5F46_4952_45

    /// `timer.fire`: many one-shot calls with delays spread evenly over two seconds.
    ///
    /// ThreadKit runs on `TimerThread.shared`, as a user would by default.
    static func fire(scale: Scale) -> Workload {
        let calls = scale.size(100_000)
        let delays = uniformDelays(calls: calls, over: scale.duration(.seconds(2)), seed: fireSeed)
        // The floor: the same deadlines met by a bare timed wait (see ``TimedWaiter``), judged in
        // the same rounds: how late the kernel wakes a thread here.
        let floorWarmUp = (0..<1_000).map { Duration.microseconds($0 * 20) }
        let floor = Contender(
            name: "floor", warmUp: { _ = TimedWaiter.measure(delays: floorWarmUp) }, run: { TimedWaiter.measure(delays: delays) })
        return Workload(
            id: "timer.fire", metrics: fireMetrics,
            contenders: fireContenders { try measureFire($0, delays: delays) } + [floor])
    }

    /// The work of a call in `timer.fire.work` and `timer.fire.burst`.
    static let callWork = Duration.microseconds(15)

    /// `timer.fire.work`: as `timer.fire` over one second, each call busy for 15 µs (75 % of one
    /// core: a timer that runs its calls on one thread queues them behind each other).
    static func fireWithWork(scale: Scale) -> Workload {
        let calls = scale.size(50_000)
        let delays = uniformDelays(calls: calls, over: scale.duration(.seconds(1)), seed: 0x574F_524B)
        return Workload(
            id: "timer.fire.work", metrics: fireMetrics,
            contenders: fireContenders { try measureFire($0, delays: delays, work: callWork) })
    }

    /// `timer.fire.burst`: 1,000 calls due at the same instant, 50 ms after the first is
    /// scheduled, each busy for 15 µs.
    ///
    /// The floor is one thread that wakes at the instant and runs the calls one after another
    /// (``TimedWaiter``): the least a timer that runs its calls on one thread can do. The last
    /// calls wait for the 15 µs of every call before them, so its p99 is about 990 × 15 µs; a peer
    /// that runs the burst on both cores can do better.
    static func fireBurst(scale: Scale) -> Workload {
        let burst = [Duration](repeating: .milliseconds(50), count: 1_000)
        let floor = Contender(
            name: "floor", warmUp: { _ = TimedWaiter.measure(delays: burst, work: callWork) },
            run: { TimedWaiter.measure(delays: burst, work: callWork) })
        return Workload(
            id: "timer.fire.burst", metrics: fireMetrics,
            contenders: fireContenders { scheduler in
                let due = ContinuousClock.now + .milliseconds(50)
                return try measureFire(scheduler, deadlines: [ContinuousClock.Instant](repeating: due, count: 1_000), work: callWork)
            } + [floor])
    }

    /// `calls` delays drawn uniformly from [0, `longest`], the same for every implementation.
    static func uniformDelays(calls: Int, over longest: Duration, seed: UInt64) -> [Duration] {
        var generator = SplitMix64(seed: seed)
        return (0..<calls).map { _ in
            Duration.nanoseconds(Int64.random(in: 0...Int64(longest.nanoseconds), using: &generator))
        }
    }

    /// Schedules one call per delay and waits for the last.
    ///
    /// Each call's deadline is read (`ContinuousClock.now + delay`) just before the call that
    /// schedules it, so the implementation's own deadline is, if anything, a little later than the
    /// recorded one: a negative lateness is a call that truly ran early. Process CPU runs from the
    /// first call to the wake-up after the last.
    static func measureFire(_ scheduler: some OneShotScheduler, delays: [Duration], work: Duration = .zero) throws -> Measurement {
        let record = FireRecord(calls: delays.count, work: work)
        let stopwatch = Stopwatch()
        for (index, delay) in delays.enumerated() {
            try record.schedule(index, after: delay, on: scheduler)
        }
        return record.awaitMeasurement(since: stopwatch)
    }

    /// As ``measureFire(_:delays:work:)``, for calls due at given instants.
    static func measureFire(
        _ scheduler: some OneShotScheduler, deadlines: [ContinuousClock.Instant], work: Duration
    ) throws -> Measurement {
        let record = FireRecord(calls: deadlines.count, work: work)
        let stopwatch = Stopwatch()
        for (index, deadline) in deadlines.enumerated() {
            try record.schedule(index, at: deadline, on: scheduler)
        }
        return record.awaitMeasurement(since: stopwatch)
    }

    // MARK: - Pending calls

    /// Pending calls of the `timer.pending` items: the cost-growth curve, 1,000 to 1,000,000.
    static let pendingSizes = [1_000, 10_000, 100_000, 1_000_000]

    /// `timer.pending` at a million calls (the item the goals are read from), `timer.pending.nN` below.
    static func pendingID(_ calls: Int) -> String {
        calls == 1_000_000 ? "timer.pending" : "timer.pending.n\(calls)"
    }

    /// `timer.pending`: far-future calls inserted, held, then cancelled, in a random order.
    ///
    /// ThreadKit uses a private `TimerThread(name:)`, disposed afterwards. `DispatchSourceTimer`
    /// (one source per call, `cancel()` frees it) is the like-for-like peer; `GCD asyncAfter` with a
    /// `DispatchWorkItem`, whose `cancel()` only sets a flag and leaves the timer in GCD's heap until
    /// its deadline, is shown beside it. Every round of each runs in a fresh process, so no round
    /// inserts beside another round's dead timers.
    static func pending(scale: Scale, calls fullCalls: Int) -> Workload {
        let calls = scale.size(fullCalls)
        var generator = SplitMix64(seed: 0x5045_4E44_494E_47)
        // An hour, plus up to a minute so that deadlines are not in insertion order.
        let delays = (0..<calls).map { _ in
            Duration.seconds(3_600) + .nanoseconds(Int64.random(in: 0...60_000_000_000, using: &generator))
        }
        let cancelOrder = Array(0..<calls).shuffled(using: &generator)
        let warmUpDelays = Array(delays.prefix(1_000)), warmUpOrder = Array((0..<warmUpDelays.count).reversed())
        let sink = Countdown(1)
        func threadKit(_ delays: [Duration], _ order: [Int]) throws -> Measurement {
            let timer = TimerThread(name: "bench.pending")
            defer { timer.dispose() }
            var stopped = 0
            let measurement = try measurePending(
                delays: delays, cancelOrder: order,
                insert: { delay in try timer.schedule(after: delay) { sink.tick() } },
                cancel: { handle in if handle.cancel() { stopped += 1 } })
            precondition(stopped == delays.count && timer.pendingCount == 0, "every ThreadKit cancel must stop its call")
            return measurement
        }
        func sourceTimer(_ delays: [Duration], _ order: [Int]) -> Measurement {
            let queue = DispatchQueue.global()
            return measurePending(
                delays: delays, cancelOrder: order,
                insert: { delay in
                    let source = DispatchSource.makeTimerSource(queue: queue)
                    source.schedule(deadline: .now() + delay.dispatchInterval)
                    source.setEventHandler { sink.tick() }
                    source.resume()
                    return source
                },
                cancel: { source in source.cancel() })
        }
        func asyncAfter(_ delays: [Duration], _ order: [Int]) -> Measurement {
            let queue = DispatchQueue.global()
            return measurePending(
                delays: delays, cancelOrder: order,
                insert: { delay in
                    let item = DispatchWorkItem { sink.tick() }
                    queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: item)
                    return item
                },
                cancel: { item in item.cancel() })
        }
        return Workload(
            id: pendingID(fullCalls),
            metrics: Metric.named(["insert per call": "ns", "cancel per call": "ns", "heap per call": "bytes", "resident per call": "bytes"]),
            contenders: [
                Contender(name: "ThreadKit", warmUp: { _ = try threadKit(warmUpDelays, warmUpOrder) }, run: { try threadKit(delays, cancelOrder) }),
                Contender(name: "DispatchSourceTimer", warmUp: { _ = sourceTimer(warmUpDelays, warmUpOrder) }, run: { sourceTimer(delays, cancelOrder) }),
                Contender(name: "GCD asyncAfter", warmUp: { _ = asyncAfter(warmUpDelays, warmUpOrder) }, run: { asyncAfter(delays, cancelOrder) }),
            ])
    }

    /// Inserts one call per delay, keeping the handles in an array allocated before the baseline,
    /// reads the C heap in use and the resident set before and after, then cancels every call in
    /// `cancelOrder`.
    static func measurePending<Handle>(
        delays: [Duration], cancelOrder: [Int],
        insert: (Duration) throws -> Handle, cancel: (Handle) -> Void
    ) rethrows -> Measurement {
        let calls = delays.count
        var handles = [Handle?](repeating: nil, count: calls)
        Memory.trim()
        let heapBefore = Memory.heapInUse()
        let residentBefore = ProcessReadings.residentBytes()
        let insertStart = ContinuousClock.now
        for index in 0..<calls {
            handles[index] = try insert(delays[index])
        }
        let insertTime = ContinuousClock.now - insertStart
        let heapAfter = Memory.heapInUse()
        let residentAfter = ProcessReadings.residentBytes()
        let cancelStart = ContinuousClock.now
        for index in cancelOrder {
            cancel(handles[index]!)
        }
        let cancelTime = ContinuousClock.now - cancelStart
        handles = []
        var measurement = Measurement()
        measurement["insert per call"] = insertTime.nanoseconds / Double(calls)
        measurement["cancel per call"] = cancelTime.nanoseconds / Double(calls)
        if let heapBefore, let heapAfter {
            measurement["heap per call"] = Double(heapAfter - heapBefore) / Double(calls)
        }
        measurement["resident per call"] = Double(residentAfter - residentBefore) / Double(calls)
        return measurement
    }

    // MARK: - Four threads at once

    /// `timer.concurrent`: four threads each schedule a quarter of 100,000 one-shot calls at once,
    /// delays uniform over half a second: the cost per call while the others schedule too, and the
    /// lateness of the calls.
    static func concurrent(scale: Scale) -> Workload {
        let calls = scale.size(100_000)
        let producers = 4
        let delays = uniformDelays(calls: calls, over: scale.duration(.milliseconds(500)), seed: 0x4355_5252)
        return Workload(
            id: "timer.concurrent",
            metrics: [Metric(name: "schedule per call", unit: "ns")] + fireMetrics,
            contenders: fireContenders { scheduler in
                let record = FireRecord(calls: calls)
                let scheduled = Countdown(producers)
                let threads = ProducerThreads(count: producers) { producer in
                    do {
                        for index in stride(from: producer, to: calls, by: producers) {
                            try record.schedule(index, after: delays[index], on: scheduler)
                        }
                    } catch {
                        fatalError("producer \(producer + 1) could not schedule: \(error)")
                    }
                    scheduled.tick()
                }
                let stopwatch = Stopwatch()
                threads.start()
                scheduled.waitForAll()
                let scheduling = stopwatch.wallNanoseconds
                var measurement = record.awaitMeasurement(since: stopwatch)
                measurement["schedule per call"] = scheduling / Double(calls)
                return measurement
            })
    }

    // MARK: - Repeating

    /// `timer.repeat`: a call every 10 ms for 10 s at a fixed rate: how far its runs fall behind
    /// the grid start + k × 10 ms, and how late the last one is (its drift). ThreadKit's
    /// `schedule(every:)` against a repeating `DispatchSourceTimer`. The two run side by side, each
    /// in its own process, after 300 ms for both to finish starting: both leave the machine idle
    /// between runs.
    static func repeating(scale: Scale) -> Workload {
        let interval = Duration.milliseconds(10)
        let runs = Int(scale.duration(.seconds(10)) / interval)
        return Workload(
            id: "timer.repeat",
            metrics: [Metric(name: "drift at end", unit: "µs")] + Metric.percentiles("lateness"),
            contenders: [
                Contender(name: "ThreadKit") {
                    try measureRepeating(runs: runs, interval: interval) { start, tick in
                        let handle = try TimerThread.shared.schedule(every: interval, startingAfter: start - .now, tick)
                        return { _ = handle.cancel() }
                    }
                },
                Contender(name: "DispatchSourceTimer") {
                    try measureRepeating(runs: runs, interval: interval) { start, tick in
                        let source = DispatchSource.makeTimerSource(queue: .global())
                        source.schedule(deadline: .now() + (start - .now).dispatchInterval, repeating: interval.dispatchInterval)
                        source.setEventHandler(handler: tick)
                        source.resume()
                        return { source.cancel() }
                    }
                },
            ],
            contendersRunTogether: true)
    }

    /// Starts a repeating call through `start(first, tick)`, which returns how to stop it; records
    /// the first `runs` runs against the grid `first + k × interval`.
    static func measureRepeating(
        runs: Int, interval: Duration,
        start: (ContinuousClock.Instant, @escaping @Sendable () -> Void) throws -> () -> Void
    ) throws -> Measurement {
        Thread.sleep(forTimeInterval: 0.3)
        let fired = InstantBuffer(count: runs)
        let next = RunCounter()
        let countdown = Countdown(runs)
        let first = ContinuousClock.now + interval
        let stop = try start(first) {
            let index = next.take()
            guard index < runs else { return }
            fired[index] = .now
            countdown.tick()
        }
        countdown.waitForAll()
        stop()
        let lateness = (0..<runs).map { (fired[$0] - (first + interval * $0)).microseconds }
        var measurement = Measurement()
        measurement.addLatencyPercentiles("lateness", samples: lateness)
        measurement["drift at end"] = lateness.last!
        return measurement
    }
}

/// A round of one-shot calls: when each was due and when it ran (each then busy for `work`).
final class FireRecord: Sendable {
    private let deadlines: InstantBuffer
    private let fired: InstantBuffer
    private let countdown: Countdown
    private let work: Duration

    init(calls: Int, work: Duration = .zero) {
        deadlines = InstantBuffer(count: calls)
        fired = InstantBuffer(count: calls)
        countdown = Countdown(calls)
        self.work = work
    }

    /// Schedules call `index` `delay` from now, its deadline read just before the call.
    func schedule(_ index: Int, after delay: Duration, on scheduler: some OneShotScheduler) throws {
        deadlines[index] = .now + delay
        try scheduler.schedule(after: delay) { self.run(index) }
    }

    /// Schedules call `index` at `deadline`.
    func schedule(_ index: Int, at deadline: ContinuousClock.Instant, on scheduler: some OneShotScheduler) throws {
        deadlines[index] = deadline
        try scheduler.schedule(at: deadline) { self.run(index) }
    }

    private func run(_ index: Int) {
        fired[index] = .now
        if work > .zero { spin(for: work) }
        countdown.tick()
    }

    /// Waits for every call; then their lateness (run − deadline, µs), the process CPU since
    /// `stopwatch` was made, and the calls that ran before their deadline.
    func awaitMeasurement(since stopwatch: Stopwatch) -> Measurement {
        countdown.waitForAll()
        let cpu = stopwatch.cpuNanoseconds
        let lateness = (0..<deadlines.count).map { (fired[$0] - deadlines[$0]).microseconds }
        var measurement = Measurement()
        measurement.addLatencyPercentiles("lateness", samples: lateness)
        measurement["process CPU"] = cpu / 1e6
        measurement["early calls"] = Double(lateness.count { $0 < 0 })
        return measurement
    }
}
