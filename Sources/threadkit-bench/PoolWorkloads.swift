// pool.throughput.p1, pool.throughput.p2, pool.schedule.p1 and pool.wake: ThreadKit's ThreadPool
// against GCD's global queue and OperationQueue.
import Dispatch
import Foundation
import ThreadKit

/// A way to hand a closure to a pool of threads, as its documentation recommends.
protocol PoolSubmitter: Sendable {
    func submit(_ work: @escaping @Sendable () -> Void) throws
}

/// `ThreadPool.execute`: the fast path, no handle.
struct ThreadKitExecute: PoolSubmitter {
    let pool: ThreadPool
    func submit(_ work: @escaping @Sendable () -> Void) throws { try pool.execute(work) }
}

/// `ThreadPool.schedule`: returns a `ScheduledTask` handle (dropped here, as by a caller that only
/// might have cancelled).
struct ThreadKitSchedule: PoolSubmitter {
    let pool: ThreadPool
    func submit(_ work: @escaping @Sendable () -> Void) throws { _ = try pool.schedule(work) }
}

/// `DispatchQueue.global().async(execute:)`.
struct GCDAsync: PoolSubmitter {
    let queue = DispatchQueue.global()
    func submit(_ work: @escaping @Sendable () -> Void) { queue.async(execute: work) }
}

/// A `DispatchWorkItem` (GCD's cancellable handle) submitted with `async(execute:)`.
struct GCDWorkItem: PoolSubmitter {
    let queue = DispatchQueue.global()
    func submit(_ work: @escaping @Sendable () -> Void) {
        let item = DispatchWorkItem(block: work)
        queue.async(execute: item)
    }
}

/// `OperationQueue.addOperation(_:)` on a queue with `maxConcurrentOperationCount = 2`.
struct OperationQueueAdd: PoolSubmitter {
    let queue: OperationQueue
    func submit(_ work: @escaping @Sendable () -> Void) { queue.addOperation(work) }
}

enum PoolWorkloads {
    /// Threads in every pool: the spec's size, and this machine's core count.
    static let poolSize = 2

    static let throughputMetrics = [
        Metric(name: "wall per item", unit: "ns"),
        Metric(name: "CPU per item", unit: "ns"),
    ]

    /// `pool.throughput.p1` / `.p2`: a million empty closures from `producers` threads.
    static func throughput(scale: Scale, producers: Int) -> Workload {
        let items = scale.size(1_000_000)
        let pool = ThreadPool(name: "bench.throughput", size: poolSize)
        var contenders = [
            Contender(name: "ThreadKit") { try measureThroughput(ThreadKitExecute(pool: pool), items: items, producers: producers) },
            Contender(name: "GCD") { try measureThroughput(GCDAsync(), items: items, producers: producers) },
        ]
        if producers == 1 {
            let operations = OperationQueue()
            operations.maxConcurrentOperationCount = poolSize
            contenders.append(Contender(name: "OperationQueue") {
                try measureThroughput(OperationQueueAdd(queue: operations), items: items, producers: producers)
            })
        }
        return Workload(
            id: "pool.throughput.p\(producers)", metrics: throughputMetrics, contenders: contenders,
            finish: { shutDown(pool) })
    }

    /// `pool.schedule.p1`: as `pool.throughput.p1`, through the APIs that return a handle.
    static func schedule(scale: Scale) -> Workload {
        let items = scale.size(1_000_000)
        let pool = ThreadPool(name: "bench.schedule", size: poolSize)
        return Workload(
            id: "pool.schedule.p1", metrics: throughputMetrics,
            contenders: [
                Contender(name: "ThreadKit") { try measureThroughput(ThreadKitSchedule(pool: pool), items: items, producers: 1) },
                Contender(name: "GCD") { try measureThroughput(GCDWorkItem(), items: items, producers: 1) },
            ],
            finish: { shutDown(pool) })
    }

    /// `pool.wake`: one submission per millisecond to an idle pool; the time until each closure starts.
    static func wake(scale: Scale) -> Workload {
        let submissions = scale.size(2_000)
        let pool = ThreadPool(name: "bench.wake", size: poolSize)
        return Workload(
            id: "pool.wake",
            metrics: ["p50", "p99", "max"].map { Metric(name: "start latency \($0)", unit: "µs") },
            contenders: [
                Contender(name: "ThreadKit") { try measureWake(ThreadKitExecute(pool: pool), submissions: submissions) },
                Contender(name: "GCD") { try measureWake(GCDAsync(), submissions: submissions) },
            ],
            finish: { shutDown(pool) })
    }

    /// Submits `items` closures from `producers` threads (the calling thread when 1) and waits
    /// until the last one has run. Wall and CPU time run from the first submission to that moment.
    static func measureThroughput<Submitter: PoolSubmitter>(
        _ submitter: Submitter, items: Int, producers: Int
    ) throws -> Measurement {
        let countdown = Countdown(items)
        let stopwatch: Stopwatch
        if producers == 1 {
            stopwatch = Stopwatch()
            for _ in 0..<items {
                try submitter.submit { countdown.tick() }
            }
        } else {
            let threads = ProducerThreads(count: producers) { index in
                let share = items / producers + (index < items % producers ? 1 : 0)
                do {
                    for _ in 0..<share {
                        try submitter.submit { countdown.tick() }
                    }
                } catch {
                    fatalError("producer \(index + 1) could not submit: \(error)")
                }
            }
            stopwatch = Stopwatch()
            threads.start()
        }
        countdown.waitForAll()
        var measurement = Measurement()
        measurement["wall per item"] = stopwatch.wallNanoseconds / Double(items)
        measurement["CPU per item"] = stopwatch.cpuNanoseconds / Double(items)
        return measurement
    }

    /// Submits one closure per millisecond (absolute ticks on `CLOCK_MONOTONIC`); each records when
    /// it started. Latency is start − the instant just before the submit call.
    static func measureWake<Submitter: PoolSubmitter>(_ submitter: Submitter, submissions: Int) throws -> Measurement {
        let submitted = InstantBuffer(count: submissions)
        let started = InstantBuffer(count: submissions)
        let countdown = Countdown(submissions)
        let period = 1_000_000
        var tick = monotonicNow().advanced(byNanoseconds: period)
        for index in 0..<submissions {
            sleep(untilMonotonic: tick)
            tick = tick.advanced(byNanoseconds: period)
            submitted[index] = .now
            try submitter.submit {
                started[index] = .now
                countdown.tick()
            }
        }
        countdown.waitForAll()
        var measurement = Measurement()
        let latencies = (0..<submissions).map { (started[$0] - submitted[$0]).microseconds }
        measurement.addLatencyPercentiles("start latency", samples: latencies)
        return measurement
    }

    private static func shutDown(_ pool: ThreadPool) {
        pool.dispose()
        _ = pool.awaitTermination(timeout: .seconds(10))
    }
}
