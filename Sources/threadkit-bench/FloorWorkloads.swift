// floor.*: what handing a closure from one thread to another costs on this machine with nothing
// in between: a single-producer/single-consumer ring whose consumer spins, never sleeps. A pool
// cannot beat it; its rows read "× floor" against it.
import Foundation
import Synchronization

/// A bounded single-producer/single-consumer ring of closures (Lamport's queue).
///
/// The producer owns `tail`, the consumer `head`; each reads the other's with acquire ordering and
/// publishes its own with release ordering, so a slot is written only by the producer while
/// `tail - head < capacity` and read only by the consumer while `head < tail`.
final class ClosureRing: @unchecked Sendable {
    // Sendable: no lock; the `head`/`tail` atomics above hand each slot from one thread to the other.
    private static let capacity = 1_024
    private static let mask = capacity - 1
    private let slots: UnsafeMutablePointer<(@Sendable () -> Void)?>
    private let paddingBeforeHead: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let head = Atomic<Int>(0)
    private let paddingBetween: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let tail = Atomic<Int>(0)
    private let paddingAfterTail: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let stopped = Atomic<Bool>(false)

    init() {
        slots = .allocate(capacity: Self.capacity)
        slots.initialize(repeating: nil, count: Self.capacity)
    }

    deinit {
        slots.deinitialize(count: Self.capacity)
        slots.deallocate()
    }

    /// Producer side: waits (spinning) for a free slot, stores `work`, publishes it.
    @inline(__always)
    func push(_ work: @escaping @Sendable () -> Void) {
        let position = tail.load(ordering: .relaxed)
        var polls = 0
        while position - head.load(ordering: .acquiring) == Self.capacity { Self.backOff(&polls) }
        slots[position & Self.mask] = work
        tail.store(position + 1, ordering: .releasing)
    }

    /// Consumer side: runs every published closure, spinning while the ring is empty, until
    /// ``stop()``. Each slot is emptied before its closure runs, so none outlives its run.
    func consume() {
        var position = head.load(ordering: .relaxed)
        var polls = 0
        while true {
            if position < tail.load(ordering: .acquiring) {
                let work = slots[position & Self.mask].take()!
                polls = 0
                position += 1
                head.store(position, ordering: .releasing)
                work()
            } else if stopped.load(ordering: .relaxed) {
                return
            } else {
                Self.backOff(&polls)
            }
        }
    }

    /// Spins; after 100 polls in a row, yields the core once per poll, so that on a machine
    /// whose other core is taken the two sides do not each burn a whole time slice waiting for
    /// the other.
    @inline(__always)
    private static func backOff(_ polls: inout Int) {
        polls += 1
        if polls > 100 { sched_yield() }
    }

    /// Ends ``consume()`` once the ring is empty.
    func stop() {
        stopped.store(true, ordering: .relaxed)
    }
}

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
        let items = scale.size(1_000_000)
        return Workload(
            id: capture == .shared ? "floor.spsc.shared" : "floor.spsc.free", metrics: PoolWorkloads.throughputMetrics,
            contenders: [
                Contender(
                    name: "floor",
                    warmUp: { _ = measureRing(items: max(items / 10, 1), capture: capture) },
                    run: { measureRing(items: items, capture: capture) })
            ])
    }

    /// `floor.inline.shared` / `floor.inline.free`: one thread stores each closure in a slot and
    /// runs it: what a closure costs with no second thread at all.
    static func inline(scale: Scale, capture: PoolWorkloads.Capture) -> Workload {
        let items = scale.size(1_000_000)
        return Workload(
            id: capture == .shared ? "floor.inline.shared" : "floor.inline.free", metrics: PoolWorkloads.throughputMetrics,
            contenders: [
                Contender(
                    name: "floor",
                    warmUp: { _ = measureInline(items: max(items / 10, 1), capture: capture) },
                    run: { measureInline(items: items, capture: capture) })
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
