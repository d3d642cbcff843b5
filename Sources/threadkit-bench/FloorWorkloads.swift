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
    static func spsc(scale: Scale, capture: Throughput.Capture) -> Workload {
        let run = Throughput(items: scale.size(1_000_000), capture: capture)
        return run.workload("floor.spsc.\(capture.rawValue)", [
            Contender(name: "floor", warmingUpOnATenth: { share in
                let ring = ClosureRing()
                let consumer = Thread { ring.consume() }
                consumer.name = "bench floor consumer"
                consumer.start()
                defer { ring.stop() }
                return try run.measure(ring, items: share.of(run.items))
            })
        ])
    }

    /// `floor.inline.shared` / `floor.inline.free`: one thread stores each closure in a slot and
    /// runs it: what a closure costs with no second thread at all.
    static func inline(scale: Scale, capture: Throughput.Capture) -> Workload {
        let run = Throughput(items: scale.size(1_000_000), capture: capture)
        return run.workload("floor.inline.\(capture.rawValue)", [
            Contender(name: "floor", warmingUpOnATenth: { share in measureInline(items: share.of(run.items), capture: capture) })
        ])
    }

    /// Stores each closure in the next of 1,024 slots and runs it at once. Written out here rather
    /// than as a ``PoolSubmitter`` for ``Throughput/measure(_:items:)``: through a submitter, the
    /// shared-capture item costs twice as much (measured), and the floor must be the least a
    /// closure costs.
    static func measureInline(items: Int, capture: Throughput.Capture) -> Measurement {
        let slots = SlotBuffer<(@Sendable () -> Void)?>(count: 1_024, initialValue: nil)
        let countdown = capture.countdown(items)
        let stopwatch = Stopwatch()
        switch capture {
        case .shared:
            for index in 0..<items {
                slots[index & 1_023] = { countdown.tick() }
                slots[index & 1_023]!()
            }
        case .free:
            for index in 0..<items {
                slots[index & 1_023] = { GlobalCountdown.shared.tick() }
                slots[index & 1_023]!()
            }
        }
        countdown.waitForAll()
        return stopwatch.perItem(items)
    }
}
