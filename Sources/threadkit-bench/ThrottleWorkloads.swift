// throttle.precision: ThreadKit's ThrottledQueue against the two usual ways to space tasks with
// Dispatch: a chain of asyncAfter calls, and a serial queue whose tasks sleep out the gap.
// throttle.rate and throttle.wait.*: what a throttle user reads besides precision: the starts a
// second a queue sustains, and the CPU it costs while it waits out a short gap.
import Dispatch
import Foundation
@_spi(ThreadKitTools) import ThreadKit
import ToolHarness

/// `throttle.*`: ThrottledQueue against an asyncAfter chain, a sleeping serial queue, a serial queue.
enum ThrottleWorkloads {
    static let interval = Duration.milliseconds(10)
    static let taskLength = Duration.milliseconds(1)

    /// `throttle.precision`: tasks of 1 ms that must start 10 ms apart.
    static func precision(scale: Scale) -> Workload {
        let tasks = scale.size(300)
        return Workload(
            id: "throttle.precision",
            metrics: Metric.percentiles("error") + Metric.named(["early starts": "count", "short gaps": "count"]),
            contenders: [
                contender("ThreadKit", tasks: tasks, runner: throttledQueue),
                contender("GCD chain", tasks: tasks, runner: asyncAfterChain),
                contender("sleep", tasks: tasks, runner: sleepingSerialQueue),
            ])
    }

    /// `throttle.rate`: how many starts a second a queue sustains with nothing to wait out: a
    /// `ThrottledQueue(interval: .zero)` against a serial `DispatchQueue`, 100,000 empty tasks
    /// submitted up front; per start (ns), and the starts a second that makes.
    static func rate(scale: Scale) -> Workload {
        let tasks = scale.size(100_000)
        func contender(_ name: String, _ submit: @escaping @Sendable (Countdown) throws -> Void) -> Contender {
            Contender(name: name, warmingUpOnATenth: { share in
                let count = share.of(tasks)
                let countdown = Countdown(count)
                let stopwatch = Stopwatch()
                for _ in 0..<count { try submit(countdown) }
                countdown.waitForAll()
                var measurement = stopwatch.perItem(count, item: "start")
                measurement["starts per second"] = 1e9 / measurement["wall per start"]!
                return measurement
            })
        }
        let queue = ThrottledQueue(label: "bench.rate", interval: .zero)
        let serial = DispatchQueue(label: "bench.rate.serial")
        return Workload(
            id: "throttle.rate",
            metrics: [Metric(name: "wall per start", unit: "ns"), Metric(name: "CPU per start", unit: "ns"),
                      Metric(name: "starts per second", unit: "/s")],
            contenders: [
                contender("ThreadKit") { countdown in try queue.async { countdown.tick() } },
                contender("GCD serial") { countdown in serial.async { countdown.tick() } },
            ])
    }

    /// `throttle.wait.1ms` and `throttle.wait.100us`: what a queue costs while it waits out a gap
    /// of `gap` between empty tasks: the process CPU over the wall time (%), a core being 100 %.
    /// Against the GCD `asyncAfter` chain with the same gap. Tasks for about half a second.
    static func wait(gap: Duration, id: String) -> @Sendable (Scale) -> Workload {
        { scale in
            let tasks = scale.size(Int(Duration.milliseconds(500) / gap))
            func contender(_ name: String, _ run: @escaping @Sendable (Int, Countdown) throws -> Void) -> Contender {
                Contender(name: name, warmingUpOnATenth: { share in
                    let count = share.of(tasks)
                    let countdown = Countdown(count)
                    let stopwatch = Stopwatch()
                    try run(count, countdown)
                    countdown.waitForAll()
                    return Measurement(values: ["CPU share": 100 * stopwatch.cpuNanoseconds / stopwatch.wallNanoseconds])
                })
            }
            return Workload(
                id: id, metrics: [Metric(name: "CPU share", unit: "%")],
                contenders: [
                    contender("ThreadKit") { count, countdown in
                        let queue = ThrottledQueue(label: "bench.wait", interval: gap)
                        for _ in 0..<count { try queue.async { countdown.tick() } }
                    },
                    contender("GCD chain") { count, countdown in
                        GapChain(gap: gap, count: count, countdown: countdown).start()
                    },
                ])
        }
    }

    /// A contender that warms up with 10 tasks (100 ms), then runs `tasks`.
    private static func contender(_ name: String, tasks: Int, runner: @escaping (Int, PacedTask) throws -> Void) -> Contender {
        Contender(
            name: name,
            warmUp: { _ = try measure(tasks: 10, runner: runner) },
            run: { try measure(tasks: tasks, runner: runner) })
    }

    /// Runs `tasks` tasks through `runner` and measures the gaps between consecutive starts.
    ///
    /// Every task records its start as its first action, busy-works for 1 ms, then counts itself
    /// done (``PacedTask``). The error of a gap is |gap − 10 ms|, and a gap below 10 ms a short gap:
    /// what the tasks see, the same way for all three.
    ///
    /// An early start is a start closer than 10 ms to the previous one at the instant the
    /// implementation itself took as the task's start and paces the next from (ThreadKit's
    /// `startOfCurrentTask`, the Dispatch versions' readings in the code below), with no
    /// tolerance. The task's own first-line reading comes after that instant, by as long as the
    /// thread was kept off its core in between (a millisecond, on a loaded machine): a gap that
    /// starts at such a reading looks short by as much, in all three contenders, though nothing
    /// started early. A pacing fault (a catch-up burst, pacing from the wrong reading) shows in
    /// the implementation's own instants.
    static func measure(tasks: Int, runner: (Int, PacedTask) throws -> Void) throws -> Measurement {
        let task = PacedTask(
            starts: InstantBuffer(count: tasks), paced: SlotBuffer(count: tasks, initialValue: .zero), countdown: Countdown(tasks))
        try runner(tasks, task)
        task.countdown.waitForAll()
        let gaps = (1..<tasks).map { (task.starts[$0] - task.starts[$0 - 1]).microseconds }
        let pacedGaps = (1..<tasks).map { task.paced[$0] - task.paced[$0 - 1] }
        let target = interval.microseconds
        var measurement = Measurement()
        measurement.addLatencyPercentiles("error", samples: gaps.map { abs($0 - target) })
        measurement["early starts"] = Double(pacedGaps.count { $0 < interval })
        measurement["short gaps"] = Double(gaps.count { $0 < target })
        return measurement
    }

    /// The task every implementation runs, in two halves so that the `asyncAfter` chain can schedule
    /// the next task before doing its work.
    struct PacedTask: Sendable {
        /// Each task's start, read in its first line.
        let starts: InstantBuffer
        /// Each task's start as the implementation took it, the instant it paces the next start
        /// from, on a monotonic time line of its own.
        let paced: SlotBuffer<Duration>
        let countdown: Countdown

        /// Records task `index`'s start, then `pacedFrom`, the implementation's own.
        func begin(_ index: Int, pacedFrom: @autoclosure () -> Duration) {
            starts[index] = .now
            paced[index] = pacedFrom()
        }

        /// The task's 1 ms of work, then its completion tick.
        func work() {
            spin(for: taskLength)
            countdown.tick()
        }

        func run(_ index: Int, pacedFrom: @autoclosure () -> Duration) {
            begin(index, pacedFrom: pacedFrom())
            work()
        }
    }

    /// A new `ThrottledQueue(interval: 10 ms)` (default `.concurrent` monitor: the gap counts from a
    /// task's start), with every task submitted up front through `async`.
    static func throttledQueue(tasks: Int, task: PacedTask) throws {
        let queue = ThrottledQueue(label: "bench.throttle", interval: interval)
        for index in 0..<tasks {
            try queue.async { task.run(index, pacedFrom: recordedStart(by: queue)) }
        }
    }

    /// The instant `queue` recorded as the start of its task that runs here.
    private static func recordedStart(by queue: ThrottledQueue) -> Duration {
        guard let start = queue.startOfCurrentTask else {
            preconditionFailure("ThrottledQueue '\(queue.label)' recorded no start for the task it runs")
        }
        return start
    }

    /// Each task, as it starts, reads `DispatchTime.now()`, schedules the next with
    /// `asyncAfter(deadline: that + 10 ms)` on a serial queue, then does its work.
    static func asyncAfterChain(tasks: Int, task: PacedTask) {
        let chain = AsyncAfterChain(tasks: tasks, task: task)
        chain.queue.async { chain.run(0) }
    }

    /// Every task submitted up front to a serial queue; each reads the clock as it starts and, after
    /// its work, sleeps (`Thread.sleep`) until 10 ms after that.
    static func sleepingSerialQueue(tasks: Int, task: PacedTask) {
        let queue = DispatchQueue(label: "bench.sleep")
        let origin = ContinuousClock.now
        for index in 0..<tasks {
            queue.async {
                let start = ContinuousClock.now
                task.run(index, pacedFrom: start - origin)
                guard index < tasks - 1 else { return }
                let rest = start + interval - ContinuousClock.now
                if rest > .zero { Thread.sleep(forTimeInterval: rest.seconds) }
            }
        }
    }
}

/// The state of an `asyncAfter` chain: task `index` schedules task `index + 1`.
private final class AsyncAfterChain: Sendable {
    let queue = DispatchQueue(label: "bench.chain")
    let tasks: Int
    let task: ThrottleWorkloads.PacedTask

    init(tasks: Int, task: ThrottleWorkloads.PacedTask) {
        self.tasks = tasks
        self.task = task
    }

    func run(_ index: Int) {
        let start = DispatchTime.now()
        let next = start + ThrottleWorkloads.interval.dispatchInterval
        task.begin(index, pacedFrom: .nanoseconds(start.uptimeNanoseconds))
        if index + 1 < tasks {
            queue.asyncAfter(deadline: next) { self.run(index + 1) }
        }
        task.work()
    }
}

/// An `asyncAfter` chain of empty tasks `gap` apart: each schedules the next from its own start.
private final class GapChain: Sendable {
    let queue = DispatchQueue(label: "bench.wait.chain")
    let gap: Duration
    let count: Int
    let countdown: Countdown

    init(gap: Duration, count: Int, countdown: Countdown) {
        (self.gap, self.count, self.countdown) = (gap, count, countdown)
    }

    func start() {
        queue.async { self.run(0) }
    }

    private func run(_ index: Int) {
        let next = DispatchTime.now() + gap.dispatchInterval
        if index + 1 < count { queue.asyncAfter(deadline: next) { self.run(index + 1) } }
        countdown.tick()
    }
}
