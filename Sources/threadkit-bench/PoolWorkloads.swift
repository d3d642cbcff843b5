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

/// The pool workloads of the specification: throughput (shared capture and capture-free), the
/// handle-returning API, and wake-up latency on an idle pool.
enum PoolWorkloads {
    /// Threads in every pool: the spec's size, and this machine's core count.
    static let poolSize = 2
    /// Producer threads of the `pool.throughput.pN` items.
    static let producerCounts = [1, 2, 4, 8, 16]
    /// Pool threads of the `pool.threads.tN` items.
    static let threadCounts = [1, 2, 4, 8, 16]

    static let throughputMetrics = [
        Metric(name: "wall per item", unit: "ns"),
        Metric(name: "CPU per item", unit: "ns"),
    ]

    /// What each item captures: today's one shared counter, or nothing.
    enum Capture {
        /// Every closure captures the same `Countdown`: its reference count moves between cores on
        /// every item, as in a program whose tasks share an object.
        case shared
        /// The closures capture nothing (no context to allocate or retain); they tick a global counter.
        case free
    }

    /// `pool.throughput.pN` (shared capture) and `pool.throughput.free.pN` (capture-free): a
    /// million empty closures from `producers` threads to a pool of 2 threads.
    static func throughput(scale: Scale, producers: Int, capture: Capture) -> Workload {
        let items = scale.size(1_000_000)
        let pool = ThreadPool(name: "bench.throughput", size: poolSize)
        var contenders = [
            throughputContender("ThreadKit", ThreadKitExecute(pool: pool), items: items, producers: producers, capture: capture),
            throughputContender("GCD", GCDAsync(), items: items, producers: producers, capture: capture),
        ]
        if producers == 1 && capture == .shared {
            let operations = OperationQueue()
            operations.maxConcurrentOperationCount = poolSize
            contenders.append(throughputContender(
                "OperationQueue", OperationQueueAdd(queue: operations), items: items, producers: producers, capture: capture))
        }
        let id = capture == .shared ? "pool.throughput.p\(producers)" : "pool.throughput.free.p\(producers)"
        return Workload(id: id, metrics: throughputMetrics, contenders: contenders, finish: { shutDown(pool) })
    }

    /// `pool.threads.tN`: half a million empty closures from one producer to a pool of `threads`
    /// threads (GCD's global queue, whose width the program does not choose, beside it).
    static func threads(scale: Scale, threads: Int) -> Workload {
        let items = scale.size(500_000)
        let pool = ThreadPool(name: "bench.threads", size: threads)
        return Workload(
            id: "pool.threads.t\(threads)", metrics: throughputMetrics,
            contenders: [
                throughputContender("ThreadKit", ThreadKitExecute(pool: pool), items: items, producers: 1, capture: .shared),
                throughputContender("GCD", GCDAsync(), items: items, producers: 1, capture: .shared),
            ],
            finish: { shutDown(pool) })
    }

    /// A contender that warms up with a tenth of the items, then measures them all.
    static func throughputContender<Submitter: PoolSubmitter>(
        _ name: String, _ submitter: Submitter, items: Int, producers: Int, capture: Capture
    ) -> Contender {
        Contender(
            name: name,
            warmUp: { _ = try measureThroughput(submitter, items: max(items / 10, 1), producers: producers, capture: capture) },
            run: { try measureThroughput(submitter, items: items, producers: producers, capture: capture) })
    }

    /// `pool.schedule.p1`: as `pool.throughput.p1`, through the APIs that return a handle.
    static func schedule(scale: Scale) -> Workload {
        let items = scale.size(1_000_000)
        let pool = ThreadPool(name: "bench.schedule", size: poolSize)
        return Workload(
            id: "pool.schedule.p1", metrics: throughputMetrics,
            contenders: [
                throughputContender("ThreadKit", ThreadKitSchedule(pool: pool), items: items, producers: 1, capture: .shared),
                throughputContender("GCD", GCDWorkItem(), items: items, producers: 1, capture: .shared),
            ],
            finish: { shutDown(pool) })
    }

    /// `pool.wake`: one submission per millisecond to an idle pool; the time until each closure
    /// starts, and the process's CPU time per wake (a worker that spins before it sleeps shows here).
    static func wake(scale: Scale) -> Workload {
        let submissions = scale.size(1_000)
        let pool = ThreadPool(name: "bench.wake", size: poolSize)
        func contender(_ name: String, _ submitter: some PoolSubmitter) -> Contender {
            Contender(
                name: name,
                warmUp: { _ = try measureWake(submitter, submissions: max(submissions / 10, 1)) },
                run: { try measureWake(submitter, submissions: submissions) })
        }
        return Workload(
            id: "pool.wake",
            metrics: Metric.percentiles("start latency") + [Metric(name: "CPU per wake", unit: "µs")],
            contenders: [contender("ThreadKit", ThreadKitExecute(pool: pool)), contender("GCD", GCDAsync())],
            finish: { shutDown(pool) })
    }

    /// Submits `items` closures from `producers` threads (the calling thread when 1) and waits
    /// until the last one has run. Wall and CPU time run from the first submission to that moment.
    static func measureThroughput<Submitter: PoolSubmitter>(
        _ submitter: Submitter, items: Int, producers: Int, capture: Capture = .shared
    ) throws -> Measurement {
        let countdown: Countdown
        switch capture {
        case .shared: countdown = Countdown(items)
        case .free:
            countdown = GlobalCountdown.shared
            countdown.arm(items)
        }
        /// Submits `count` items: each a new closure, as a program makes one per task.
        @Sendable func submit(_ count: Int) throws {
            switch capture {
            case .shared:
                for _ in 0..<count { try submitter.submit { countdown.tick() } }
            case .free:
                for _ in 0..<count { try submitter.submit { GlobalCountdown.shared.tick() } }
            }
        }
        let stopwatch: Stopwatch
        if producers == 1 {
            stopwatch = Stopwatch()
            try submit(items)
        } else {
            let threads = ProducerThreads(count: producers) { index in
                let share = items / producers + (index < items % producers ? 1 : 0)
                do {
                    try submit(share)
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
        let stopwatch = Stopwatch()
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
        let cpu = stopwatch.cpuNanoseconds
        var measurement = Measurement()
        let latencies = (0..<submissions).map { (started[$0] - submitted[$0]).microseconds }
        measurement.addLatencyPercentiles("start latency", samples: latencies)
        measurement["CPU per wake"] = cpu / 1e3 / Double(submissions)
        return measurement
    }

    private static func shutDown(_ pool: ThreadPool) {
        pool.dispose()
        _ = pool.awaitTermination(timeout: .seconds(10))
    }
}
