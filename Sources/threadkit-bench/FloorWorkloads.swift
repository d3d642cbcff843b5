// floor.*: what handing a closure from one thread to another costs on this machine with nothing
// in between: a single-producer/single-consumer ring whose consumer spins, never sleeps. Pool rows
// read "× floor" against it (a pool whose threads all run closures can go below one consumer).
import Foundation

/// The floor workloads, and which floor each pool row is read against.
enum FloorWorkloads {
    /// The floor of a workload's per-item rows, if it has one.
    static func floor(for workload: String) -> String? {
        if workload.hasPrefix("pool.throughput.free.") { return "floor.spsc.free" }
        if workload.hasPrefix("pool.throughput.") || workload.hasPrefix("pool.threads.")
            || workload == "pool.schedule.p1" || workload == "dedicated.throughput" {
            return "floor.spsc.shared"
        }
        return nil
    }

    /// `floor.spsc.shared` / `floor.spsc.free`: a million closures (sharing a capture, or
    /// capture-free) through a ``ClosureRing`` to one spinning consumer thread.
    static func spsc(scale: Scale, capture: PoolWorkloads.Capture) -> Workload {
        floorWorkload("floor.spsc", scale: scale, capture: capture, measure: measureRing)
    }

    /// `floor.inline.shared` / `floor.inline.free`: one thread stores each closure in a slot and
    /// runs it: what a closure costs with no second thread at all.
    static func inline(scale: Scale, capture: PoolWorkloads.Capture) -> Workload {
        floorWorkload("floor.inline", scale: scale, capture: capture, measure: measureInline)
    }

    /// `<prefix>.shared` or `<prefix>.free`: a million items through `measure`, after a tenth of
    /// them as a warm-up.
    private static func floorWorkload(
        _ prefix: String, scale: Scale, capture: PoolWorkloads.Capture,
        measure: @escaping @Sendable (_ items: Int, _ capture: PoolWorkloads.Capture) -> Measurement
    ) -> Workload {
        let items = scale.size(1_000_000)
        return Workload(
            id: "\(prefix).\(capture == .shared ? "shared" : "free")", metrics: PoolWorkloads.throughputMetrics,
            contenders: [
                Contender(
                    name: "floor",
                    warmUp: { _ = measure(max(items / 10, 1), capture) },
                    run: { measure(items, capture) })
            ])
    }

    static func measureRing(items: Int, capture: PoolWorkloads.Capture) -> Measurement {
        let ring = ClosureRing()
        let consumer = Thread { ring.consume() }
        consumer.name = "bench floor consumer"
        consumer.start()
        let countdown: Countdown
        let stopwatch: Stopwatch
        switch capture {
        case .shared:
            countdown = Countdown(items)
            stopwatch = Stopwatch()
            for _ in 0..<items { ring.push { countdown.tick() } }
        case .free:
            countdown = GlobalCountdown.shared
            countdown.arm(items)
            stopwatch = Stopwatch()
            for _ in 0..<items { ring.push { GlobalCountdown.shared.tick() } }
        }
        countdown.waitForAll()
        var measurement = Measurement()
        measurement["wall per item"] = stopwatch.wallNanoseconds / Double(items)
        measurement["CPU per item"] = stopwatch.cpuNanoseconds / Double(items)
        ring.stop()
        return measurement
    }

    static func measureInline(items: Int, capture: PoolWorkloads.Capture) -> Measurement {
        let slots = SlotBuffer<(@Sendable () -> Void)?>(count: 1_024, initialValue: nil)
        let countdown: Countdown
        let stopwatch: Stopwatch
        switch capture {
        case .shared:
            countdown = Countdown(items)
            stopwatch = Stopwatch()
            for index in 0..<items {
                slots[index & 1_023] = { countdown.tick() }
                slots[index & 1_023]!()
            }
        case .free:
            countdown = GlobalCountdown.shared
            countdown.arm(items)
            stopwatch = Stopwatch()
            for index in 0..<items {
                slots[index & 1_023] = { GlobalCountdown.shared.tick() }
                slots[index & 1_023]!()
            }
        }
        countdown.waitForAll()
        var measurement = Measurement()
        measurement["wall per item"] = stopwatch.wallNanoseconds / Double(items)
        measurement["CPU per item"] = stopwatch.cpuNanoseconds / Double(items)
        return measurement
    }
}
