// The workloads users choose a pool by: latency under open-loop load, memory of a queue and after
// it drains, tasks that block, fairness between producers, an idle pool, and Swift tasks.
import Dispatch
import Foundation
import Glibc
import Synchronization
import ThreadKit
import SeededRandom
import ToolHarness

/// Open-loop latency, memory, blocking tasks, fairness, an idle pool and Swift tasks.
enum PoolChoiceWorkloads {
    static let catalogue: [WorkloadEntry] = [
        ("pool.latency.u70.t10", { openLoop(scale: $0, utilisation: 70, taskMicroseconds: 10) }),
        ("pool.latency.u95.t10", { openLoop(scale: $0, utilisation: 95, taskMicroseconds: 10) }),
        ("pool.latency.u70.t100", { openLoop(scale: $0, utilisation: 70, taskMicroseconds: 100) }),
        ("pool.latency.u95.t100", { openLoop(scale: $0, utilisation: 95, taskMicroseconds: 100) }),
        ("pool.memory", memory),
        ("pool.blocking", blocking),
        ("pool.fairness", fairness),
        ("pool.cold", cold),
        ("pool.idle", idle),
        ("pool.executor", executor),
    ]

    private static let poolSize = PoolWorkloads.poolSize

    /// The three pools: ThreadKit's `pool` of 2, GCD's global queue, and a fresh `OperationQueue`
    /// of width 2.
    private static func threePools(_ pool: ThreadPool) -> [(name: String, submitter: any PoolSubmitter)] {
        [("ThreadKit", ThreadKitExecute(pool: pool)), ("GCD", GCDAsync()), ("OperationQueue", OperationQueueAdd(width: poolSize))]
    }

    /// A contender of each of the three pools, measured by `measure`.
    private static func threePools(
        _ pool: ThreadPool, _ measure: @escaping (_ submitter: any PoolSubmitter, _ share: Share) throws -> Measurement
    ) -> [Contender] {
        threePools(pool).map { name, submitter in
            Contender(name: name, warmingUpOnATenth: { share in try measure(submitter, share) })
        }
    }

    /// A contender of ThreadKit's `pool` and one of GCD's global queue, each measured once by `measure`.
    private static func threadKitAndGCD(_ pool: ThreadPool, _ measure: @escaping (any PoolSubmitter) throws -> Measurement) -> [Contender] {
        [("ThreadKit", ThreadKitExecute(pool: pool) as any PoolSubmitter), ("GCD", GCDAsync())].map { name, submitter in
            Contender(name: name) { try measure(submitter) }
        }
    }

    // MARK: - Open-loop latency

    /// `pool.latency.uU.tT`: tasks of T µs arriving at random (exponential gaps, the same seeded
    /// gaps for every pool) at a rate that keeps the pool's 2 threads U % busy; the time from each
    /// submit call to the task's start. Open loop: arrivals do not wait for earlier tasks.
    static func openLoop(scale: Scale, utilisation: Int, taskMicroseconds: Int) -> Workload {
        let tasks = scale.size(taskMicroseconds <= 10 ? 20_000 : 4_000)
        let task = Duration.microseconds(taskMicroseconds)
        // Arrivals per ns: utilisation × threads / task length.
        let meanGap = task.nanoseconds / (Double(utilisation) / 100 * Double(poolSize))
        var generator = SplitMix64(seed: UInt64(utilisation * 1_000 + taskMicroseconds))
        var offset = 0.0
        let arrivals = (0..<tasks).map { _ in
            offset += -log(Double.random(in: Double.ulpOfOne..<1, using: &generator)) * meanGap
            return Int(offset)
        }
        return PoolWorkloads.onPool("pool.latency.u\(utilisation).t\(taskMicroseconds)", metrics: Metric.percentiles("start latency")) { pool in
            threePools(pool) { submitter, share in
                try measureOpenLoop(submitter, arrivals: Array(arrivals.prefix(share.of(tasks))), task: task)
            }
        }
    }

    /// Submits a task at each arrival (ns after the start). The producer sleeps until the next
    /// arrival (`clock_nanosleep`, absolute) and submits every task that is due, reading the clock
    /// just before each submit call; each task reads it as it starts.
    static func measureOpenLoop(_ submitter: some PoolSubmitter, arrivals: [Int], task: Duration) throws -> Measurement {
        let count = arrivals.count
        let submitted = InstantBuffer(count: count)
        let started = InstantBuffer(count: count)
        let countdown = Countdown(count)
        let origin = monotonicNow()
        let clockOrigin = ContinuousClock.now
        var index = 0
        while index < count {
            let due = clockOrigin + .nanoseconds(arrivals[index])
            if ContinuousClock.now < due {
                sleep(untilMonotonic: origin.advanced(byNanoseconds: arrivals[index]))
            }
            let now = ContinuousClock.now
            while index < count, clockOrigin + .nanoseconds(arrivals[index]) <= now {
                let slot = index
                submitted[slot] = .now
                try submitter.submit {
                    started[slot] = .now
                    spin(for: task)
                    countdown.tick()
                }
                index += 1
            }
        }
        countdown.waitForAll()
        var measurement = Measurement()
        measurement.addLatencyPercentiles("start latency", samples: (0..<count).map { (started[$0] - submitted[$0]).microseconds })
        return measurement
    }

    // MARK: - Memory

    /// `pool.memory`: a million tasks queued while the pool cannot run them, then let go. ThreadKit's
    /// two threads are held by two tasks waiting on a semaphore; GCD's tasks go to a suspended
    /// concurrent queue that targets the global queue (GCD grows its pool past blocked threads, so
    /// holding them would not keep its tasks queued). Measured with `mallinfo2()` (heap in use) and
    /// the resident set: bytes per queued task, and what the process still holds once every task has
    /// run and 200 ms have passed.
    static func memory(scale: Scale) -> Workload {
        let tasks = scale.size(1_000_000)
        let metrics = Metric.named([
            "heap per queued task": "bytes", "resident per queued task": "bytes", "heap after drain": "MB", "resident after drain": "MB",
        ])
        return PoolWorkloads.onPool("pool.memory", metrics: metrics) { pool in
            [
                Contender(name: "ThreadKit") {
                    let gate = DispatchSemaphore(value: 0)
                    let holding = Countdown(poolSize)
                    for _ in 0..<poolSize {
                        try pool.execute {
                            holding.tick()
                            gate.wait()
                        }
                    }
                    holding.waitForAll()
                    return try measureBurst(tasks: tasks, submit: { try pool.execute($0) }, release: {
                        for _ in 0..<poolSize { gate.signal() }
                    })
                },
                Contender(name: "GCD") {
                    let queue = DispatchQueue(label: "bench.memory", attributes: .concurrent, target: .global())
                    queue.suspend()
                    return measureBurst(tasks: tasks, submit: { queue.async(execute: $0) }, release: { queue.resume() })
                },
            ]
        }
    }

    static func measureBurst(
        tasks: Int, submit: (@escaping @Sendable () -> Void) throws -> Void, release: () -> Void
    ) rethrows -> Measurement {
        let countdown = Countdown(tasks)
        Memory.trim()
        let heapBefore = Memory.heapInUse() ?? 0
        let residentBefore = ProcessReadings.residentBytes()
        for _ in 0..<tasks { try submit { countdown.tick() } }
        let heapQueued = Memory.heapInUse() ?? 0
        let residentQueued = ProcessReadings.residentBytes()
        release()
        countdown.waitForAll()
        Thread.sleep(forTimeInterval: 0.2)
        var measurement = Measurement()
        measurement["heap per queued task"] = Double(heapQueued - heapBefore) / Double(tasks)
        measurement["resident per queued task"] = Double(residentQueued - residentBefore) / Double(tasks)
        if let heap = Memory.heapInUse() { measurement["heap after drain"] = Double(heap) / 1e6 }
        measurement["resident after drain"] = Double(ProcessReadings.residentBytes()) / 1e6
        return measurement
    }

    // MARK: - Blocking tasks

    /// `pool.blocking`: 1,000 tasks that each sleep 1 ms, submitted at once; the wall time per task
    /// and how many threads the process gained. ThreadKit and `OperationQueue` stay at 2 running
    /// tasks; GCD adds threads while its workers block. No goal: these are different promises.
    static func blocking(scale: Scale) -> Workload {
        let tasks = scale.size(1_000)
        return PoolWorkloads.onPool("pool.blocking", metrics: Metric.named(["wall per task": "µs", "threads used": "count"])) { pool in
            threePools(pool).map { name, submitter in
                Contender(name: name) {
                    let threadsBefore = ProcessReadings.threadCount()
                    let countdown = Countdown(tasks)
                    let stopwatch = Stopwatch()
                    for _ in 0..<tasks {
                        try submitter.submit {
                            sleep(untilMonotonic: monotonicNow().advanced(byNanoseconds: 1_000_000))
                            countdown.tick()
                        }
                    }
                    countdown.waitForAll()
                    let wall = stopwatch.wallNanoseconds
                    var measurement = Measurement()
                    measurement["wall per task"] = wall / 1e3 / Double(tasks)
                    measurement["threads used"] = Double(ProcessReadings.threadCount() - threadsBefore)
                    return measurement
                }
            }
        }
    }

    // MARK: - Fairness

    /// `pool.fairness`: 4 producers each keep 16 tasks of 2 µs in flight (submitting another as
    /// one finishes), so that together they keep the pool saturated, for half a second; then each
    /// producer's share of the tasks that started. The spread between the largest and smallest
    /// share (percentage points; 0 is perfectly fair), and the smallest share.
    static func fairness(scale: Scale) -> Workload {
        let producers = 4
        let window = scale.duration(.milliseconds(500))
        return PoolWorkloads.onPool("pool.fairness", metrics: Metric.named(["share spread": "points", "lowest share": "%"])) { pool in
            threePools(pool) { submitter, share in measureFairness(submitter, producers: producers, window: share.of(window)) }
        }
    }

    /// What one producer of `pool.fairness` has in flight and has had started.
    final class ProducerTally: Sendable {
        let inFlight = Atomic<Int>(0)
        let started = Atomic<Int>(0)
    }

    static func measureFairness(_ submitter: some PoolSubmitter, producers: Int, window: Duration) -> Measurement {
        let tallies = (0..<producers).map { _ in ProducerTally() }
        let counting = Atomic<Bool>(false)
        let stopping = Atomic<Bool>(false)
        let finished = Countdown(producers)
        let threads = ProducerThreads(count: producers) { producer in
            let tally = tallies[producer]
            do {
                while !stopping.load(ordering: .relaxed) {
                    if tally.inFlight.load(ordering: .relaxed) < 16 {
                        tally.inFlight.add(1, ordering: .relaxed)
                        try submitter.submit {
                            if counting.load(ordering: .relaxed) { tally.started.add(1, ordering: .relaxed) }
                            spin(for: .microseconds(2))
                            tally.inFlight.subtract(1, ordering: .relaxed)
                        }
                    } else {
                        sched_yield()
                    }
                }
                while tally.inFlight.load(ordering: .relaxed) > 0 { sched_yield() }
            } catch {
                fatalError("producer \(producer + 1) could not submit: \(error)")
            }
            finished.tick()
        }
        threads.start()
        // Counting starts once every producer has had time to fill its 16 slots.
        Thread.sleep(forTimeInterval: 0.02)
        counting.store(true, ordering: .relaxed)
        Thread.sleep(forTimeInterval: window.seconds)
        counting.store(false, ordering: .relaxed)
        stopping.store(true, ordering: .relaxed)
        finished.waitForAll()
        let starts = tallies.map { Double($0.started.load(ordering: .relaxed)) }
        let total = max(starts.reduce(0, +), 1)
        let shares = starts.map { $0 / total * 100 }
        var measurement = Measurement()
        measurement["share spread"] = shares.max()! - shares.min()!
        measurement["lowest share"] = shares.min()!
        return measurement
    }

    // MARK: - Idle

    /// `pool.cold`: a cold pool in a fresh process: how long its first task takes to start, from
    /// the submit call (the pool starts its first thread).
    static func cold(scale: Scale) -> Workload {
        func measure(_ submitter: any PoolSubmitter) throws -> Measurement {
            let started = InstantBuffer(count: 1)
            let countdown = Countdown(1)
            let submitted = ContinuousClock.now
            try submitter.submit {
                started[0] = .now
                countdown.tick()
            }
            countdown.waitForAll()
            return Measurement(values: ["first task latency": (started[0] - submitted).microseconds])
        }
        return PoolWorkloads.onPool("pool.cold", metrics: [Metric(name: "first task latency", unit: "µs")]) { pool in
            threadKitAndGCD(pool, measure)
        }
    }

    /// `pool.idle`: the CPU time of every thread but the measuring one over 10 s with the pool idle,
    /// from 100 ms after one task ran (threads that exit meanwhile are not seen). The contenders run
    /// side by side, each in its own process, after 300 ms for both to finish starting: idle
    /// processes do not disturb each other.
    static func idle(scale: Scale) -> Workload {
        let quiet = scale.duration(.seconds(10))
        func measure(_ submitter: any PoolSubmitter) throws -> Measurement {
            Thread.sleep(forTimeInterval: 0.3)
            let countdown = Countdown(1)
            try submitter.submit { countdown.tick() }
            countdown.waitForAll()
            Thread.sleep(forTimeInterval: 0.1)
            let before = ThreadCPU.others()
            Thread.sleep(forTimeInterval: quiet.seconds)
            let after = ThreadCPU.others()
            let used = after.reduce(0.0) { sum, entry in sum + entry.value - (before[entry.key] ?? 0) }
            return Measurement(values: ["idle CPU": used / 1e6])
        }
        return PoolWorkloads.onPool("pool.idle", metrics: [Metric(name: "idle CPU", unit: "ms")], contendersRunTogether: true) { pool in
            threadKitAndGCD(pool, measure)
        }
    }

    // MARK: - Swift tasks

    /// `pool.executor`: a task group of 100,000 child tasks, each returning a number, under
    /// `withTaskExecutorPreference(pool)` against the same group on the default executor.
    static func executor(scale: Scale) -> Workload {
        let tasks = scale.size(100_000)
        return PoolWorkloads.onPool("pool.executor", metrics: Metric.named(["wall per task": "ns", "CPU per task": "ns"])) { pool in
            [
                Contender(name: "ThreadKit", warmingUpOnATenth: { share in measureGroup(tasks: share.of(tasks), preferring: pool) }),
                Contender(name: "default executor", warmingUpOnATenth: { share in measureGroup(tasks: share.of(tasks), preferring: nil) }),
                Contender(name: "floor", warmingUpOnATenth: { share in
                    measureGroup(tasks: share.of(tasks), preferring: SpinningExecutor.shared)
                }),
            ]
        }
    }

    static func measureGroup(tasks: Int, preferring executor: (any TaskExecutor)?) -> Measurement {
        let done = DispatchSemaphore(value: 0)
        let stopwatch = Stopwatch()
        Task {
            let sum: Int
            if let executor {
                sum = await withTaskExecutorPreference(executor) { await spawnChildren(tasks) }
            } else {
                sum = await spawnChildren(tasks)
            }
            precondition(sum == tasks, "every child task must return")
            done.signal()
        }
        done.wait()
        return stopwatch.perItem(tasks, item: "task")
    }

    private static func spawnChildren(_ count: Int) async -> Int {
        await withTaskGroup(of: Int.self) { group in
            for _ in 0..<count { group.addTask { 1 } }
            var sum = 0
            for await value in group { sum += value }
            return sum
        }
    }
}

/// `pool.executor`'s floor: the least an executor can add to a Swift task. Jobs go into an array
/// under a mutex, and one thread that never sleeps takes them all at once and runs them inline:
/// no wake-up, no allocation of its own, no bookkeeping, no second thread to share the allocator
/// with. What the row measures is what the runtime itself costs per child task (making it,
/// running it, resuming the group, destroying it).
///
/// Made once, in the floor contender's own process (its warm-up and its measured round share
/// it), and never stopped: the process ends after the round, and no other contender's process
/// has this spinning thread.
final class SpinningExecutor: TaskExecutor {
    static let shared = SpinningExecutor()

    private let jobs = Mutex<[UnownedJob]>([])

    private init() {
        let thread = Thread { [self] in spin() }
        thread.name = "bench executor floor"
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
    }

    private func spin() -> Never {
        var batch: [UnownedJob] = []
        while true {
            jobs.withLock { swap(&$0, &batch) }
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
