import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An unbounded first-in, first-out queue that any number of threads push to and pop from without
/// a lock, and that can be closed to further pushes.
///
/// The algorithm is crossbeam's `SegQueue` (the list flavour of crossbeam-channel for `close`). The
/// queue is a linked list of blocks of ``blockCapacity`` slots. A pusher claims the next slot with
/// one compare-and-swap on the tail index, then writes its element and marks the slot written; a
/// popper claims the next slot with one compare-and-swap on the head index, waits until that slot is
/// written (its pusher is at most a few instructions behind), and takes the element. Elements leave
/// in the order their slots were claimed, so the queue is linearizable: a push that returned before
/// another began is popped first.
///
/// The thread that claims a block's last slot links the next block, which it allocated beforehand,
/// so the others never wait for an allocation. A block is freed by the last thread to finish with
/// it: the popper of its last slot frees it unless a slot before is still being read, in which case
/// that slot's reader, when it finishes, frees it (a `destroy` mark handed from slot to slot). So a
/// drained queue holds at most one block, and a thread that read a stale block pointer never uses
/// it: it uses a block only after its compare-and-swap proved the pointer current.
///
/// Closing sets a mark bit in the tail index: a push either claimed its slot before the mark (and its
/// element will be popped) or sees the mark and fails, handing its element back. Nothing pushed is
/// lost, and nothing is pushed after `close()` returns.
final class IntakeQueue<Element>: @unchecked Sendable {
    // Sendable: every shared word is an atomic; a slot's element is written only by the thread that
    // claimed the slot for pushing, before it sets `written` (release), and read only by the thread
    // that claimed it for popping, after it saw `written` (acquire).

    /// Slots per block; one index per lap of ``lap`` is spent marking the move to the next block.
    static var blockCapacity: Int { 31 }
    private static var lap: Int { 32 }
    /// Indices move in steps of `1 << shift`; the low bit is a flag (head: `hasNext`; tail: `closed`).
    private static var shift: Int { 1 }
    private static var step: Int { 1 << shift }
    /// On the head index: the head block has a successor, so the queue is not empty past its end.
    private static var hasNext: Int { 1 }
    /// On the tail index: the queue is closed.
    private static var closed: Int { 1 }

    /// Slot states.
    private static var written: Int { 1 }
    private static var read: Int { 2 }
    private static var destroy: Int { 4 }

    private let headIndex = Atomic<Int>(0)
    private let headBlock = Atomic<Unmanaged<Block>?>(nil)
    // Keeps the consumers' and the producers' words on different cache lines.
    private let padding: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let tailIndex = Atomic<Int>(0)
    private let tailBlock = Atomic<Unmanaged<Block>?>(nil)

    init() {}

    deinit {
        // No other thread can touch the queue now: drop what is left, then free the blocks.
        var head = headIndex.load(ordering: .relaxed) & ~Self.hasNext
        let tail = tailIndex.load(ordering: .relaxed) & ~Self.closed
        var block = headBlock.load(ordering: .relaxed)
        while head != tail {
            let offset = (head >> Self.shift) % Self.lap
            if offset < Self.blockCapacity {
                (Self.parts(of: block!).values + offset).deinitialize(count: 1)
            } else {
                let next = Self.parts(of: block!).next.pointee.load(ordering: .relaxed)
                block!.release()
                block = next
            }
            head &+= Self.step
        }
        block?.release()
    }

    /// Adds `element` at the back.
    ///
    /// - Returns: `nil`, or `element` itself if the queue is closed.
    func push(_ element: consuming Element) -> Element? {
        var (tail, block) = loadTail()
        var spareBlock: Unmanaged<Block>?
        defer { spareBlock?.release() }
        var pushBackoff = Backoff()
        while true {
            if tail & Self.closed != 0 { return element }
            let offset = (tail >> Self.shift) % Self.lap
            if offset == Self.blockCapacity {
                // Another pusher is linking the next block: wait for it to finish.
                pushBackoff.snooze()
                (tail, block) = loadTail()
                continue
            }
            // The pusher of a block's last slot links the next block: allocate it before claiming.
            if offset + 1 == Self.blockCapacity, spareBlock == nil {
                spareBlock = Unmanaged.passRetained(Block())
            }
            if block == nil {
                // The very first push installs the first block.
                let first = spareBlock ?? Unmanaged.passRetained(Block())
                spareBlock = nil
                if tailBlock.compareExchange(expected: nil, desired: first, ordering: .releasing).exchanged {
                    headBlock.store(first, ordering: .releasing)
                    block = first
                } else {
                    spareBlock = first
                    (tail, block) = loadTail()
                    continue
                }
            }
            let (exchanged, current) = tailIndex.compareExchange(
                expected: tail, desired: tail &+ Self.step,
                successOrdering: .sequentiallyConsistent, failureOrdering: .acquiring)
            guard exchanged else {
                tail = current
                block = tailBlock.load(ordering: .acquiring)
                continue
            }
            let claimed = Self.parts(of: block!)
            if offset + 1 == Self.blockCapacity {
                // Move the tail past the lap's spare index, into the next block.
                let next = spareBlock!
                spareBlock = nil
                tailBlock.store(next, ordering: .releasing)
                tailIndex.wrappingAdd(Self.step, ordering: .releasing)
                claimed.next.pointee.store(next, ordering: .releasing)
            }
            (claimed.values + offset).initialize(to: element)
            claimed.states[offset].bitwiseOr(Self.written, ordering: .releasing)
            return nil
        }
    }

    /// Removes and returns the front element, or `nil` if the queue is empty.
    ///
    /// If the front slot is claimed but its element not yet written, waits (yielding the core) for
    /// its pusher, which is a few instructions from done.
    func pop() -> Element? {
        var (head, block) = loadHead()
        var popBackoff = Backoff()
        while true {
            let offset = (head >> Self.shift) % Self.lap
            if offset == Self.blockCapacity {
                // Another popper is moving the head to the next block: wait for it to finish.
                popBackoff.snooze()
                (head, block) = loadHead()
                continue
            }
            var newHead = head &+ Self.step
            if head & Self.hasNext == 0 {
                atomicMemoryFence(ordering: .sequentiallyConsistent)
                let tail = tailIndex.load(ordering: .relaxed)
                if head >> Self.shift == tail >> Self.shift { return nil }
                if (head >> Self.shift) / Self.lap != (tail >> Self.shift) / Self.lap {
                    newHead |= Self.hasNext
                }
            }
            guard let current = block else {
                // The first push has claimed its slot but not yet installed the first block.
                popBackoff.snooze()
                (head, block) = loadHead()
                continue
            }
            let (exchanged, seen) = headIndex.compareExchange(
                expected: head, desired: newHead,
                successOrdering: .sequentiallyConsistent, failureOrdering: .acquiring)
            guard exchanged else {
                head = seen
                block = headBlock.load(ordering: .acquiring)
                continue
            }
            let claimed = Self.parts(of: current)
            if offset + 1 == Self.blockCapacity {
                // Move the head into the next block, once its pusher has linked it.
                var linkBackoff = Backoff()
                var linked = claimed.next.pointee.load(ordering: .acquiring)
                while linked == nil {
                    linkBackoff.snooze()
                    linked = claimed.next.pointee.load(ordering: .acquiring)
                }
                let next = linked!
                var nextIndex = (newHead & ~Self.hasNext) &+ Self.step
                if Self.parts(of: next).next.pointee.load(ordering: .relaxed) != nil { nextIndex |= Self.hasNext }
                headBlock.store(next, ordering: .releasing)
                headIndex.store(nextIndex, ordering: .releasing)
            }
            var backoff = Backoff()
            while claimed.states[offset].load(ordering: .acquiring) & Self.written == 0 { backoff.snooze() }
            let element = (claimed.values + offset).move()
            if offset + 1 == Self.blockCapacity {
                Self.destroy(current, from: 0)
            } else if claimed.states[offset].bitwiseOr(Self.read, ordering: .acquiringAndReleasing).oldValue
                & Self.destroy != 0
            {
                Self.destroy(current, from: offset + 1)
            }
            return element
        }
    }

    /// Closes the queue: every later push fails. Pushes that claimed a slot before still complete.
    func close() {
        tailIndex.bitwiseOr(Self.closed, ordering: .sequentiallyConsistent)
    }

    /// Whether ``close()`` was called.
    var isClosed: Bool {
        tailIndex.load(ordering: .acquiring) & Self.closed != 0
    }

    /// How many elements are in the queue, counting slots claimed but not yet written; exact only
    /// while no other thread pushes or pops.
    var count: Int {
        let head = headIndex.load(ordering: .sequentiallyConsistent) >> Self.shift
        let tail = tailIndex.load(ordering: .sequentiallyConsistent) >> Self.shift
        func position(_ index: Int) -> Int {
            (index / Self.lap) * Self.blockCapacity + min(index % Self.lap, Self.blockCapacity)
        }
        return max(0, position(tail) - position(head))
    }

    /// Whether the queue looks empty: two loads, no write, for a thread watching for work.
    var isEmpty: Bool {
        headIndex.load(ordering: .acquiring) >> Self.shift == tailIndex.load(ordering: .acquiring) >> Self.shift
    }

    /// The tail index and the tail block, in that order: a pusher's starting point, and where it
    /// starts over after losing a race. The block may be stale; only a won compare-and-swap on the
    /// index proves it current.
    private func loadTail() -> (index: Int, block: Unmanaged<Block>?) {
        (tailIndex.load(ordering: .acquiring), tailBlock.load(ordering: .acquiring))
    }

    /// The head index and the head block, in that order: a popper's starting point, and where it
    /// starts over after losing a race (see ``loadTail()``).
    private func loadHead() -> (index: Int, block: Unmanaged<Block>?) {
        (headIndex.load(ordering: .acquiring), headBlock.load(ordering: .acquiring))
    }

    /// Frees `block` once slots `start..<blockCapacity - 1` are all read; a slot still being read
    /// gets the `destroy` mark, and its reader continues from the next slot when it finishes.
    private static func destroy(_ block: Unmanaged<Block>, from start: Int) {
        let states = parts(of: block).states
        for offset in start..<(blockCapacity - 1) {
            if states[offset].load(ordering: .acquiring) & read == 0,
                states[offset].bitwiseOr(destroy, ordering: .acquiringAndReleasing).oldValue & read == 0
            {
                return
            }
        }
        block.release()
    }

    /// Waits for another thread that is a few instructions from done: looks again at once a
    /// number of times (it is most likely running on another core), then yields the core (it may
    /// have been preempted, and be waiting for this one).
    private struct Backoff {
        private var looks = 0

        mutating func snooze() {
            if looks < 64 {
                looks += 1
            } else {
                sched_yield()
            }
        }
    }

    /// A block's link and slots, without retaining the block: its memory is owned by the queue's
    /// protocol (freed by ``destroy(_:from:)``), and touching its reference count from every
    /// thread would make its header the most contended line of the queue.
    private static func parts(of block: Unmanaged<Block>) -> Block.Parts {
        block._withUnsafeGuaranteedRef { $0.parts }
    }

    /// A block of slots: one state word and one element per slot, and the link to the next block.
    private final class Block {
        struct Parts {
            let next: UnsafeMutablePointer<Atomic<Unmanaged<Block>?>>
            let states: UnsafeMutablePointer<Atomic<Int>>
            let values: UnsafeMutablePointer<Element>
        }

        let parts: Parts

        init() {
            let next = UnsafeMutablePointer<Atomic<Unmanaged<Block>?>>.allocate(capacity: 1)
            next.initialize(to: Atomic(nil))
            let states = UnsafeMutablePointer<Atomic<Int>>.allocate(capacity: IntakeQueue.blockCapacity)
            for offset in 0..<IntakeQueue.blockCapacity {
                (states + offset).initialize(to: Atomic(0))
            }
            parts = Parts(next: next, states: states, values: .allocate(capacity: IntakeQueue.blockCapacity))
        }

        deinit {
            // Elements were moved out by their poppers, or dropped by the queue's deinit.
            parts.next.deinitialize(count: 1)
            parts.next.deallocate()
            parts.states.deinitialize(count: IntakeQueue.blockCapacity)
            parts.states.deallocate()
            parts.values.deallocate()
        }
    }
}
