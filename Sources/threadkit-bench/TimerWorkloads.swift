// timer.fire and timer.pending: ThreadKit's TimerThread against GCD's asyncAfter and one
// DispatchSourceTimer per call.
import Dispatch
import Foundation
import ThreadKit

/// A way to run a closure once, after a delay counted from the call.
protocol OneShotScheduler: Sendable {
    func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) throws
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

enum TimerWorkloads {
    /// `timer.fire`: many one-shot calls with delays spread evenly over two seconds.
    ///
    /// ThreadKit runs on `TimerThread.shared`, as a user would by default.
    static func fire(scale: Scale) -> Workload {
        let calls = scale.size(100_000)
        let longest = scale.isQuick ? Duration.milliseconds(200) : .seconds(2)
        var generator = SeededGenerator(seed: 0x7153_5F46_4952_45)
        let delays = (0..<calls).map { _ in
            Duration.nanoseconds(Int64.random(in: 0...Int64(longest.nanoseconds), using: &generator))
        }
        let metrics = ["p50", "p99", "max"].map { Metric(name: "lateness \($0)", unit: "µs") } + [
            Metric(name: "process CPU", unit: "ms"),
            Metric(name: "early calls", unit: "count"),
        ]
        return Workload(
            id: "timer.fire", metrics: metrics,
            contenders: [
                Contender(name: "ThreadKit") { try measureFire(ThreadKitTimer(timer: .shared), delays: delays) },
                Contender(name: "GCD asyncAfter") { try measureFire(GCDAsyncAfter(), delays: delays) },
                Contender(name: "DispatchSourceTimer") { try measureFire(GCDTimerSource(), delays: delays) },
            ])
    }

    /// Schedules one call per delay, each recording when it ran, and waits for the last.
    ///
    /// Each call's deadline is read (`ContinuousClock.now + delay`) just before the call that
    /// schedules it, so the implementation's own deadline is, if anything, a little later than the
    /// recorded one: a negative lateness is a call that truly ran early. Process CPU runs from the
    /// first call to the wake-up after the last.
    static func measureFire<Scheduler: OneShotScheduler>(_ scheduler: Scheduler, delays: [Duration]) throws -> Measurement {
        let calls = delays.count
        let deadlines = InstantBuffer(count: calls)
        let fired = InstantBuffer(count: calls)
        let countdown = Countdown(calls)
        let stopwatch = Stopwatch()
        for index in 0..<calls {
            let delay = delays[index]
            deadlines[index] = .now + delay
            try scheduler.schedule(after: delay) {
                fired[index] = .now
                countdown.tick()
            }
        }
        countdown.waitForAll()
        let cpu = stopwatch.cpuNanoseconds
        let lateness = (0..<calls).map { (fired[$0] - deadlines[$0]).microseconds }
        var measurement = Measurement()
        measurement.addLatencyPercentiles("lateness", samples: lateness)
        measurement["process CPU"] = cpu / 1e6
        measurement["early calls"] = Double(lateness.count { $0 < 0 })
        return measurement
    }

    /// `timer.pending`: a million far-future calls inserted, held, then cancelled.
    ///
    /// Each ThreadKit repetition uses a new private `TimerThread(name:)`, disposed afterwards, so its
    /// heap's storage is counted every time rather than reused from the previous repetition.
    static func pending(scale: Scale) -> Workload {
        let calls = scale.size(1_000_000)
        var generator = SeededGenerator(seed: 0x5045_4E44_494E_47)
        // An hour, plus up to a minute so that deadlines are not in insertion order.
        let delays = (0..<calls).map { _ in
            Duration.seconds(3_600) + .nanoseconds(Int64.random(in: 0...60_000_000_000, using: &generator))
        }
        let cancelOrder = Array(0..<calls).shuffled(using: &generator)
        let sink = Countdown(1)
        return Workload(
            id: "timer.pending",
            metrics: [
                Metric(name: "insert per call", unit: "ns"),
                Metric(name: "resident per call", unit: "bytes"),
                Metric(name: "cancel per call", unit: "ns"),
            ],
            contenders: [
                Contender(name: "ThreadKit") {
                    let timer = TimerThread(name: "bench.pending")
                    defer { timer.dispose() }
                    var stopped = 0
                    let measurement = try measurePending(
                        delays: delays, cancelOrder: cancelOrder,
                        insert: { delay in try timer.schedule(after: delay) { sink.tick() } },
                        cancel: { handle in if handle.cancel() { stopped += 1 } })
                    precondition(stopped == calls && timer.pendingCount == 0, "every ThreadKit cancel must stop its call")
                    return measurement
                },
                Contender(name: "GCD asyncAfter") {
                    let queue = DispatchQueue.global()
                    return measurePending(
                        delays: delays, cancelOrder: cancelOrder,
                        insert: { delay in
                            let item = DispatchWorkItem { sink.tick() }
                            queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: item)
                            return item
                        },
                        cancel: { item in item.cancel() })
                },
            ])
    }

    /// Inserts one call per delay, keeping the handles in an array allocated before the baseline,
    /// reads the resident set before and after, then cancels every call in `cancelOrder`.
    static func measurePending<Handle>(
        delays: [Duration], cancelOrder: [Int],
        insert: (Duration) throws -> Handle, cancel: (Handle) -> Void
    ) rethrows -> Measurement {
        let calls = delays.count
        var handles = [Handle?](repeating: nil, count: calls)
        Memory.trim()
        let residentBefore = Memory.residentBytes()
        let insertStart = ContinuousClock.now
        for index in 0..<calls {
            handles[index] = try insert(delays[index])
        }
        let insertTime = ContinuousClock.now - insertStart
        let residentAfter = Memory.residentBytes()
        let cancelStart = ContinuousClock.now
        for index in cancelOrder {
            cancel(handles[index]!)
        }
        let cancelTime = ContinuousClock.now - cancelStart
        handles = []
        Memory.trim()
        var measurement = Measurement()
        measurement["insert per call"] = insertTime.nanoseconds / Double(calls)
        measurement["resident per call"] = Double(residentAfter - residentBefore) / Double(calls)
        measurement["cancel per call"] = cancelTime.nanoseconds / Double(calls)
        return measurement
    }
}
