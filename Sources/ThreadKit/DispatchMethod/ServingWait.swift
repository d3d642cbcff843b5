import Synchronization

/// Where re-entered work runs (rule 1 of ``ExecutionContexts``): the pure decision.
enum ReentryPlace: Equatable, Sendable {
    /// On the calling thread, at once.
    case inline
    /// On the thread that runs the context's work, which serves the request in its wait.
    case owner

    /// - Parameters:
    ///   - isThreadAffine: The context's work must run on its own thread (a dedicated thread, a
    ///     serial queue, the main queue).
    ///   - ownerIsCaller: The calling thread is the one that runs the context's work.
    ///   - ownerServes: The thread that runs the context's work waits in a way that serves nested
    ///     requests. When it does not, the work runs inline: waiting for it could never end.
    init(isThreadAffine: Bool, ownerIsCaller: Bool, ownerServes: Bool) {
        self = isThreadAffine && !ownerIsCaller && ownerServes ? .owner : .inline
    }
}

extension ExecutionContexts {
    /// Where one thread sleeps in its serving waits, and where work re-entering a thread-affine
    /// context it runs (A → B → A) is left for it.
    ///
    /// A thread that runs a thread-affine context's work and blocks until other work has run waits
    /// here (``Completion/_blockingWait(spinningFor:)``), not on the other side's condition: the
    /// work it waits for may need it to run a nested piece of A's work first, on A's thread.
    final class Parker: @unchecked Sendable {
        // Sendable: `requests` is guarded by `mutex`.
        private let mutex = PThreadMutex()
        private let changed = MonotonicCondition()
        private var requests = RingBuffer<NestedRequest>()

        /// Leaves `request` for the thread to run in its wait.
        func post(_ request: NestedRequest) {
            mutex.withLock {
                requests.append(request)
                changed.broadcast()
            }
        }

        /// Wakes the thread to look at its completion again.
        fileprivate func wake() {
            mutex.withLock { changed.broadcast() }
        }

        /// Sleeps until `completion` is done, running the requests left here meanwhile.
        fileprivate func _blockingServe(until completion: Completion) {
            mutex.lock()
            guard completion.markCallerSleeps() else {
                mutex.unlock()
                return
            }
            // No binding outlives a run: the request is consumed as a temporary, released before
            // the lock is taken again.
            var next: NestedRequest?
            while !completion.isDone {
                next = requests.popFirst()
                if next == nil {
                    changed.wait(mutex)
                    continue
                }
                mutex.unlock()
                next.take()!.serve()
                mutex.lock()
            }
            mutex.unlock()
        }
    }

    /// Whether the work a blocked caller waits for has run; wakes the caller's ``Parker`` when it has.
    final class Completion: Sendable {
        private static let pending = 0, done = 1, callerSleeps = 2
        /// `pending`, then `done` once the work ran. A caller that stops spinning moves `pending`
        /// to `callerSleeps` under its parker's mutex before it sleeps, and ``finish()``, finding
        /// that, wakes it under the same mutex: no wakeup is lost.
        private let phase = Atomic<Int>(Completion.pending)
        private let waiter: Parker

        /// A completion whose caller sleeps on `waiter`.
        init(waiter: Parker) {
            self.waiter = waiter
        }

        /// A completion for the calling thread to wait for.
        convenience init() {
            self.init(waiter: Record.currentOrNew().parker)
        }

        var isDone: Bool { phase.load(ordering: .acquiring) == Completion.done }

        /// Tells the caller that its work has run.
        func finish() {
            if phase.exchange(Completion.done, ordering: .acquiringAndReleasing) == Completion.callerSleeps {
                waiter.wake()
            }
        }

        /// Whether the caller may sleep: `false` once done. Parker's mutex held.
        fileprivate func markCallerSleeps() -> Bool {
            phase.compareExchange(
                expected: Completion.pending, desired: Completion.callerSleeps, ordering: .acquiringAndReleasing
            ).exchanged
        }

        /// Blocks the caller until the work has run: watches for `spin` first, then sleeps on its
        /// parker, running the nested requests that come to it meanwhile.
        func _blockingWait(spinningFor spin: Duration = .zero) {
            if spin > .zero, spinBriefly(for: spin, until: { isDone }) { return }
            waiter._blockingServe(until: self)
        }
    }

    /// Work that re-enters a thread-affine context, left for the thread that runs its work.
    final class NestedRequest: Sendable {
        /// The requester's closure, lent while the requester waits.
        private let work: BorrowedWork
        /// What the requester holds, for the work to hold too.
        private let handover: Handover
        private let completion: Completion

        init(work: BorrowedWork, handover: Handover, completion: Completion) {
            self.work = work
            self.handover = handover
            self.completion = completion
        }

        /// Runs the work on the calling thread, holding what the requester held, and tells the requester.
        fileprivate func serve() {
            handover.run { work.run() }
            completion.finish()
        }
    }
}
