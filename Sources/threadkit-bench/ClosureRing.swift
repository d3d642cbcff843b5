// The ring behind the floor workloads.
import Glibc
import Synchronization

/// A bounded single-producer/single-consumer ring of closures (Lamport's queue).
///
/// The producer owns `tail`, the consumer `head`; each reads the other's with acquire ordering and
/// publishes its own with release ordering, so a slot is written only by the producer while
/// `tail - head < capacity` and read only by the consumer while `head < tail`.
final class ClosureRing: PoolSubmitter, @unchecked Sendable {
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
    func submit(_ work: @escaping @Sendable () -> Void) {
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
    static func backOff(_ polls: inout Int) {
        polls += 1
        if polls > 100 { sched_yield() }
    }

    /// Ends ``consume()`` once the ring is empty.
    func stop() {
        stopped.store(true, ordering: .relaxed)
    }
}
