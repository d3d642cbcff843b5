// Every workload, in the order of the report.

/// A workload's id and how to make it at a scale.
typealias WorkloadEntry = (id: String, make: @Sendable (Scale) -> Workload)

/// The workloads the benchmark knows, by id.
enum Catalogue {
    /// Every workload, in the order they run and are reported: the floors first, as the pool rows
    /// are read against them.
    static let workloads: [WorkloadEntry] = {
        var list: [WorkloadEntry] = [
            ("floor.spsc.shared", { FloorWorkloads.spsc(scale: $0, capture: .shared) }),
            ("floor.spsc.free", { FloorWorkloads.spsc(scale: $0, capture: .free) }),
            ("floor.inline.shared", { FloorWorkloads.inline(scale: $0, capture: .shared) }),
            ("floor.inline.free", { FloorWorkloads.inline(scale: $0, capture: .free) }),
        ]
        for producers in PoolWorkloads.producerCounts {
            list.append(("pool.throughput.p\(producers)", { PoolWorkloads.throughput(scale: $0, producers: producers, capture: .shared) }))
        }
        for producers in [1, 2] {
            list.append(("pool.throughput.free.p\(producers)", { PoolWorkloads.throughput(scale: $0, producers: producers, capture: .free) }))
        }
        list.append(("pool.schedule.p1", PoolWorkloads.schedule))
        for threads in PoolWorkloads.threadCounts {
            list.append(("pool.threads.t\(threads)", { PoolWorkloads.threads(scale: $0, threads: threads) }))
        }
        list.append(("pool.wake", PoolWorkloads.wake))
        list += PoolChoiceWorkloads.catalogue
        list += [
            ("timer.fire", TimerWorkloads.fire),
            ("timer.fire.work", TimerWorkloads.fireWithWork),
            ("timer.fire.burst", TimerWorkloads.fireBurst),
        ]
        for calls in TimerWorkloads.pendingSizes {
            list.append((TimerWorkloads.pendingID(calls), { TimerWorkloads.pending(scale: $0, calls: calls) }))
        }
        list += [
            ("timer.concurrent", TimerWorkloads.concurrent),
            ("timer.repeat", TimerWorkloads.repeating),
            ("throttle.precision", ThrottleWorkloads.precision),
            ("throttle.rate", ThrottleWorkloads.rate),
            ("throttle.wait.1ms", ThrottleWorkloads.wait(gap: .milliseconds(1), id: "throttle.wait.1ms")),
            ("throttle.wait.100us", ThrottleWorkloads.wait(gap: .microseconds(100), id: "throttle.wait.100us")),
            ("log.disabled", LogWorkloads.disabled),
            ("dedicated.throughput", DispatchWorkloads.dedicatedThroughput),
            ("dedicated.sync", DispatchWorkloads.dedicatedSync),
            ("dispatch.sync.held", DispatchWorkloads.syncWhileHolding),
            ("url.loopback", URLWorkloads.loopback),
            ("url.timeout", URLWorkloads.timeout),
            ("url.history", URLWorkloads.history),
            ("diagnostics.dump", DiagnosticsWorkloads.dump),
        ]
        list += RedisWorkloads.catalogue
        return list
    }()
}
