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
            Contender(name: "floor", warmingUpOnATenth: { share in try run.measure(InlineRunner(), items: share.of(run.items)) })
        ])
    }
}

/// Stores each closure in the next of 1,024 slots and runs it at once, on the submitting thread.
final class InlineRunner: PoolSubmitter, @unchecked Sendable {
    // Sendable: no lock; one runner is made and used by the one thread that measures.
    private let slots = SlotBuffer<(@Sendable () -> Void)?>(count: 1_024, initialValue: nil)
    private var next = 0

    @inline(__always)
    func submit(_ work: @escaping @Sendable () -> Void) {
        let slot = next & 1_023
        next += 1
        slots[slot] = work
        slots[slot]!()
    }
}
