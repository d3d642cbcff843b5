// diagnostics.dump: what a dump costs in a big process, and how long it holds up the components
// it reads.
import Foundation
import ThreadKit
import ToolHarness

/// `diagnostics.dump`: a process with 1,000 pool threads, each running a task, and 100,000 pending
/// timer calls; the dump (`Diagnostics.snapshot().description`) and the metrics
/// (`Diagnostics.prometheusText()`) are taken 20 times each.
enum DiagnosticsWorkloads {
    static let threads = 1_000
    static let timerCalls = 100_000
    static let dumps = 20

    static func dump(scale: Scale) -> Workload {
        Workload(
            id: "diagnostics.dump",
            metrics: Metric.percentiles("dump", unit: "ms") + Metric.percentiles("prometheus", unit: "ms")
                + Metric.percentiles("timer insert during dumps", unit: "µs"),
            contenders: [
                Contender(name: "ThreadKit") {
                    let pool = ThreadPool(name: "bench dump", size: threads)
                    let release = DispatchSemaphore(value: 0)
                    let started = DispatchSemaphore(value: 0)
                    for _ in 0..<threads {
                        try pool.execute {
                            started.signal()
                            release.wait()
                        }
                    }
                    for _ in 0..<threads { started.wait() }
                    let timer = TimerThread(name: "bench dump timer")
                    for index in 0..<timerCalls {
                        try timer.schedule(after: .seconds(3600), tag: index) {}
                    }
                    // A thread inserts timer calls while the dumps run: how long an insert waits
                    // is how long a dump holds the timer's lock.
                    let stop = ManagedAtomicFlag()
                    let inserts = InsertTimes()
                    let inserter = Thread {
                        while !stop.isSet {
                            let start = ContinuousClock.now
                            let handle = try? timer.schedule(after: .seconds(3600)) {}
                            inserts.append((ContinuousClock.now - start).microseconds)
                            handle?.cancel()
                            usleep(200)
                        }
                    }
                    inserter.start()
                    var dumpTimes: [Double] = []
                    var prometheusTimes: [Double] = []
                    for _ in 0..<dumps {
                        let start = ContinuousClock.now
                        let text = Diagnostics.snapshot().description
                        dumpTimes.append((ContinuousClock.now - start).microseconds / 1e3)
                        precondition(text.contains("ThreadPool \"bench dump\""), "the dump must list the pool")
                        let middle = ContinuousClock.now
                        _ = Diagnostics.prometheusText()
                        prometheusTimes.append((ContinuousClock.now - middle).microseconds / 1e3)
                    }
                    stop.set()
                    while !inserter.isFinished { usleep(1_000) }
                    for _ in 0..<threads { release.signal() }
                    _ = timer.dispose()
                    pool.dispose()
                    var measurement = Measurement()
                    measurement.addLatencyPercentiles("dump", samples: dumpTimes)
                    measurement.addLatencyPercentiles("prometheus", samples: prometheusTimes)
                    measurement.addLatencyPercentiles("timer insert during dumps", samples: inserts.values)
                    return measurement
                }
            ])
    }

    /// A flag set once, read by another thread.
    private final class ManagedAtomicFlag: @unchecked Sendable {
        // Sendable: `value` is guarded by `lock`.
        private let lock = NSLock()
        private var value = false
        var isSet: Bool { lock.withLock { value } }
        func set() { lock.withLock { value = true } }
    }

    /// Insert times, appended by one thread and read after it finished.
    private final class InsertTimes: @unchecked Sendable {
        // Sendable: `times` is guarded by `lock`.
        private let lock = NSLock()
        private var times: [Double] = []
        func append(_ time: Double) { lock.withLock { times.append(time) } }
        var values: [Double] { lock.withLock { times } }
    }
}
