// pool.throughput.*, pool.threads.*, pool.schedule.p1 and pool.wake: ThreadKit's ThreadPool
// against GCD's global queue and OperationQueue.
import Foundation
import ThreadKit
import ToolHarness

/// The pool workloads of the specification: throughput (shared capture and capture-free), the
/// handle-returning API, and wake-up latency on an idle pool.
enum PoolWorkloads {
    /// Threads in every pool: the spec's size, and this machine's core count.
    static let poolSize = 2
    /// Producer threads of the `pool.throughput.pN` items.
    static let producerCounts = [1, 2, 4, 8, 16]
    /// Pool threads of the `pool.threads.tN` items.
    static let threadCounts = [1, 2, 4, 8, 16]

    /// The workload `id`, whose contenders use a ThreadKit pool of `size` threads made for it and
    /// shut down after the round.
    static func onPool(
        _ id: String, size: Int = poolSize, metrics: [Metric], contendersRunTogether: Bool = false,
        _ contenders: (ThreadPool) -> [Contender]
    ) -> Workload {
        let pool = ThreadPool(name: "bench.\(id)", size: size)
        return Workload(
            id: id, metrics: metrics, contenders: contenders(pool), contendersRunTogether: contendersRunTogether,
            finish: pool.shutDown)
    }

    /// `pool.throughput.pN` (shared capture) and `pool.throughput.free.pN` (capture-free): a
    /// million empty closures from `producers` threads to a pool of 2 threads, against GCD (and,
    /// for `pool.throughput.p1`, `OperationQueue`).
    static func throughput(scale: Scale, producers: Int, capture: Throughput.Capture) -> Workload {
        let run = Throughput(items: scale.size(1_000_000), producers: producers, capture: capture)
        let id = capture == .shared ? "pool.throughput.p\(producers)" : "pool.throughput.free.p\(producers)"
        let withOperationQueue = producers == 1 && capture == .shared
        return onPool(id, metrics: Throughput.metrics) { pool in
            [run.contender("ThreadKit", ThreadKitExecute(pool: pool)), run.contender("GCD", GCDAsync())]
                + (withOperationQueue ? [run.contender("OperationQueue", OperationQueueAdd(width: poolSize))] : [])
        }
    }

    /// `pool.threads.tN`: half a million empty closures from one producer to a pool of `threads`
    /// threads (GCD's global queue, whose width the program does not choose, beside it).
    static func threads(scale: Scale, threads: Int) -> Workload {
        let run = Throughput(items: scale.size(500_000))
        return onPool("pool.threads.t\(threads)", size: threads, metrics: Throughput.metrics) { pool in
            [run.contender("ThreadKit", ThreadKitExecute(pool: pool)), run.contender("GCD", GCDAsync())]
        }
    }

    /// `pool.schedule.p1`: as `pool.throughput.p1`, through the APIs that return a handle.
    static func schedule(scale: Scale) -> Workload {
        let run = Throughput(items: scale.size(1_000_000))
        return onPool("pool.schedule.p1", metrics: Throughput.metrics) { pool in
            [run.contender("ThreadKit", ThreadKitSchedule(pool: pool)), run.contender("GCD", GCDWorkItem())]
        }
    }

    /// `pool.wake`: one submission per millisecond to an idle pool; the time until each closure
    /// starts, and the process's CPU time per wake (a worker that spins before it sleeps shows here).
    /// The floor (``FutexParkedThread``) does the same job with the cheapest wake the machine has:
    /// how far below GCD any pool can go here.
    static func wake(scale: Scale) -> Workload {
        let submissions = scale.size(1_000)
        func contender(_ name: String, _ submitter: some PoolSubmitter) -> Contender {
            Contender(name: name, warmingUpOnATenth: { share in try measureWake(submitter, submissions: share.of(submissions)) })
        }
        let pool = ThreadPool(name: "bench.pool.wake", size: poolSize)
        let floor = FutexParkedThread()
        return Workload(
            id: "pool.wake", metrics: Metric.percentiles("start latency") + [Metric(name: "CPU per wake", unit: "µs")],
            contenders: [
                contender("ThreadKit", ThreadKitExecute(pool: pool)), contender("GCD", GCDAsync()), contender("floor", floor),
            ],
            finish: {
                pool.shutDown()
                floor.stop()
            })
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
}

/// Empty closures handed to other threads as fast as they are taken: what the throughput
/// workloads of the pools, the floors and the dedicated thread measure, as wall and CPU time per item.
struct Throughput {
    /// What each item captures: one shared counter, or nothing.
    enum Capture: String {
        /// Every closure captures the same `Countdown`: its reference count moves between cores on
        /// every item, as in a program whose tasks share an object.
        case shared
        /// The closures capture nothing (no context to allocate or retain); they tick a global counter.
        case free

        /// The countdown of `items` items: a new one they share, or the global one, armed.
        func countdown(_ items: Int) -> Countdown {
            switch self {
            case .shared: return Countdown(items)
            case .free:
                GlobalCountdown.shared.arm(items)
                return GlobalCountdown.shared
            }
        }
    }

    static let metrics = Metric.named(["wall per item": "ns", "CPU per item": "ns"])

    /// Items of a measured round.
    let items: Int
    var producers = 1
    var capture = Capture.shared

    /// A contender that warms up with a tenth of the items, then measures them all.
    func contender(_ name: String, _ submitter: some PoolSubmitter) -> Contender {
        Contender(name: name, warmingUpOnATenth: { share in try measure(submitter, items: share.of(items)) })
    }

    /// The workload `id` of `contenders`, with the throughput metrics.
    func workload(_ id: String, _ contenders: [Contender], finish: @escaping () -> Void = {}) -> Workload {
        Workload(id: id, metrics: Self.metrics, contenders: contenders, finish: finish)
    }

    /// Submits `items` closures from `producers` threads (the calling thread when 1) and waits
    /// until the last one has run. Wall and CPU time run from the first submission to that moment.
    func measure<Submitter: PoolSubmitter>(_ submitter: Submitter, items: Int) throws -> Measurement {
        let countdown = capture.countdown(items)
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
            let producers = producers
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
        return stopwatch.perItem(items)
    }
}
