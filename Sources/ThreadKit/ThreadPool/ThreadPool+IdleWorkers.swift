import Synchronization

extension ThreadPool {
    /// The pool's idle workers in one word, so that a submitter reads them with one load: the
    /// sleeping workers (on the state machine's list, woken only by a signal) in the upper half,
    /// the spinning ones (watching the intake for a moment, one at a time) in the lower half.
    ///
    /// Each half counts up to 2³² − 1 workers (65,535 on a 32-bit platform).
    struct IdleWord {
        /// The word as stored.
        let rawValue: Int

        /// What one sleeping worker adds to the word.
        static let oneSleeper = 1 << (Int.bitWidth / 2)
        /// What one spinning worker adds to the word.
        static let oneSpinner = 1

        /// The workers asleep on the idle list.
        var sleepers: Int { rawValue / Self.oneSleeper }
        /// The workers spinning before they sleep.
        var spinners: Int { rawValue % Self.oneSleeper }
    }

    /// The idle workers as submitters see them without the mutex: an ``IdleWord`` with two named
    /// parts, changed with sequentially consistent operations (the wake protocol of
    /// ``ThreadPool/enqueue(_:_:)`` rests on them).
    ///
    /// - **sleepers**: a copy of the state machine's count of sleeping workers, which the shell
    ///   publishes after each decision (``publishSleepers(_:)``), under the mutex.
    /// - **spinners**: owned here. A worker counts itself in under the mutex (so only one spins at
    ///   a time) and out when its spin ends, with or without the mutex.
    struct IdleWorkers: ~Copyable {
        private let word = Atomic<Int>(0)

        /// Both parts, as they are now.
        @inline(__always)
        var current: IdleWord {
            IdleWord(rawValue: word.load(ordering: .sequentiallyConsistent))
        }

        /// Counts the calling worker as spinning. Mutex held.
        func addSpinner() {
            word.wrappingAdd(IdleWord.oneSpinner, ordering: .sequentiallyConsistent)
        }

        /// Stops counting the calling worker as spinning.
        func removeSpinner() {
            word.wrappingSubtract(IdleWord.oneSpinner, ordering: .sequentiallyConsistent)
        }

        /// Makes the sleepers part read `count`. Mutex held: only holders change that part, so a
        /// relaxed read of it is exact, and nothing is written when it is already right.
        @inline(__always)
        func publishSleepers(_ count: Int) {
            let published = IdleWord(rawValue: word.load(ordering: .relaxed)).sleepers
            guard count != published else { return }
            word.wrappingAdd((count - published) * IdleWord.oneSleeper, ordering: .sequentiallyConsistent)
        }
    }

    /// Names a started worker within ``WorkerList``: its slot, reused once the worker has left.
    struct WorkerID: Hashable, Sendable {
        fileprivate let slot: Int
    }

    /// What an idle or busy worker is doing, as the state machine sees it.
    enum Rest: Equatable, Sendable {
        /// Running work, spinning, or looking in the intake.
        case busy
        /// On the idle list, waiting to be woken.
        case asleep
        /// Taken off the idle list by a submitter that handed it work.
        case handedWork
        /// Taken off the idle list to look in the intake.
        case wokenToLook
    }

    /// Every started worker, and the sleeping ones among them in the order they fell asleep: a
    /// pure value, part of the ``StateMachine``.
    ///
    /// Workers live in slots of an array, so that the sleepers form a doubly linked list by slot
    /// number: reuse takes the most recent sleeper (so the others age and retire), and retirement
    /// removes any, each in one step, so a thousand threads retiring at one collector tick cost a
    /// thousand steps, not a million.
    struct WorkerList<Worker> {
        private struct Node {
            var worker: Worker?
            var rest = Rest.busy
            /// The neighbours on the sleepers list while asleep, by slot.
            var earlier: Int?
            var later: Int?
        }

        private var nodes: [Node] = []
        private var freeSlots: [Int] = []
        private var oldestSleeper: Int?
        private var newestSleeper: Int?
        /// Workers started and not yet left.
        private(set) var count = 0
        /// Workers asleep on the list.
        private(set) var sleeperCount = 0

        /// Registers a started worker, busy.
        mutating func add(_ worker: Worker) -> WorkerID {
            count += 1
            if let slot = freeSlots.popLast() {
                nodes[slot] = Node(worker: worker)
                return WorkerID(slot: slot)
            }
            nodes.append(Node(worker: worker))
            return WorkerID(slot: nodes.count - 1)
        }

        /// Forgets a worker that leaves; it must not be asleep.
        mutating func remove(_ id: WorkerID) {
            precondition(nodes[id.slot].rest != .asleep, "a worker leaves the sleepers before it leaves the pool")
            nodes[id.slot] = Node()
            freeSlots.append(id.slot)
            count -= 1
        }

        /// What the worker is doing.
        func rest(of id: WorkerID) -> Rest {
            nodes[id.slot].rest
        }

        /// Puts a busy worker at the newest end of the sleepers list.
        mutating func fallAsleep(_ id: WorkerID) {
            precondition(nodes[id.slot].rest == .busy, "a worker falls asleep once, from busy")
            nodes[id.slot].rest = .asleep
            nodes[id.slot].earlier = newestSleeper
            if let newest = newestSleeper { nodes[newest].later = id.slot } else { oldestSleeper = id.slot }
            newestSleeper = id.slot
            sleeperCount += 1
        }

        /// Takes the most recent sleeper off the list, marked as `rest` (handed work or woken to look).
        mutating func wakeMostRecent(as rest: Rest) -> Worker? {
            guard let slot = newestSleeper else { return nil }
            unlink(slot)
            nodes[slot].rest = rest
            return nodes[slot].worker
        }

        /// Marks the worker busy, taking it off the sleepers list if it is there.
        mutating func markBusy(_ id: WorkerID) {
            if nodes[id.slot].rest == .asleep { unlink(id.slot) }
            nodes[id.slot].rest = .busy
        }

        /// The sleepers, oldest first.
        var sleepers: [Worker] {
            var result: [Worker] = []
            result.reserveCapacity(sleeperCount)
            var next = oldestSleeper
            while let slot = next {
                result.append(nodes[slot].worker!)
                next = nodes[slot].later
            }
            return result
        }

        /// Every started worker that has not left, in no particular order.
        var all: some Sequence<Worker> {
            nodes.lazy.compactMap(\.worker)
        }

        private mutating func unlink(_ slot: Int) {
            let (earlier, later) = (nodes[slot].earlier, nodes[slot].later)
            if let earlier { nodes[earlier].later = later } else { oldestSleeper = later }
            if let later { nodes[later].earlier = earlier } else { newestSleeper = earlier }
            nodes[slot].earlier = nil
            nodes[slot].later = nil
            sleeperCount -= 1
        }
    }
}
