// throttle.precision: ThreadKit's ThrottledQueue against the two usual ways to space tasks with
// Dispatch: a chain of asyncAfter calls, and a serial queue whose tasks sleep out the gap.
import Dispatch
import Foundation
import ThreadKit
import ToolHarness

/// `throttle.precision`: ThrottledQueue against an asyncAfter chain and a sleeping serial queue.
enum ThrottleWorkloads {
    static let interval = Duration.milliseconds(10)
    static let taskLength = Duration.milliseconds(1)
    /// How far short of `interval` a gap must be to count as an early start.
    ///
    /// Every start is read in the task's first line, a few instructions after the implementation's
    /// own reading; a thread preempted in between shows a gap short by as long as it was off its
    /// core, and that hits the Dispatch contenders as it hits ThreadKit. A pacing fault (a catch-up burst, pacing from the wrong reading) shortens
    /// a gap by about a task's length or more: 1 ms here. Gaps short by less are still counted, as
    /// `short gaps`, with no goal.
    static let earlyTolerance = Duration.microseconds(500)

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
    /// done (``PacedTask``). The error of a gap is |gap − 10 ms|; a gap below 10 ms is a short gap,
    /// and one more than ``earlyTolerance`` below it an early start.
    ///
    /// Each implementation takes its own clock reading just before the task begins (ThreadKit inside
    /// the queue; the Dispatch versions in the code below), and paces the next start from it, so all
    /// three are seen the same way: a thread preempted between that reading and the task's first
    /// line shows as a late start followed by a gap that looks short by as much.
    static func measure(tasks: Int, runner: (Int, PacedTask) throws -> Void) throws -> Measurement {
        let task = PacedTask(starts: InstantBuffer(count: tasks), countdown: Countdown(tasks))
        try runner(tasks, task)
        task.countdown.waitForAll()
        let gaps = (1..<tasks).map { (task.starts[$0] - task.starts[$0 - 1]).microseconds }
        let target = interval.microseconds
        var measurement = Measurement()
        measurement.addLatencyPercentiles("error", samples: gaps.map { abs($0 - target) })
        measurement["early starts"] = Double(gaps.count { $0 < target - earlyTolerance.microseconds })
        measurement["short gaps"] = Double(gaps.count { $0 < target })
        return measurement
    }

    /// The task every implementation runs, in two halves so that the `asyncAfter` chain can schedule
    /// the next task before doing its work.
    struct PacedTask: Sendable {
        let starts: InstantBuffer
        let countdown: Countdown

        /// Records task `index`'s start.
        func begin(_ index: Int) {
            starts[index] = .now
        }

        /// The task's 1 ms of work, then its completion tick.
        func work() {
            spin(for: taskLength)
            countdown.tick()
        }

        func run(_ index: Int) {
            begin(index)
            work()
        }
    }

    /// A new `ThrottledQueue(interval: 10 ms)` (default `.concurrent` monitor: the gap counts from a
    /// task's start), with every task submitted up front through `async`.
    static func throttledQueue(tasks: Int, task: PacedTask) throws {
        let queue = ThrottledQueue(label: "bench.throttle", interval: interval)
        for index in 0..<tasks {
            try queue.async { task.run(index) }
        }
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
        for index in 0..<tasks {
            queue.async {
                let start = ContinuousClock.now
                task.run(index)
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
        let next = DispatchTime.now() + ThrottleWorkloads.interval.dispatchInterval
        task.begin(index)
        if index + 1 < tasks {
            queue.asyncAfter(deadline: next) { self.run(index + 1) }
        }
        task.work()
    }
}
