import Synchronization

extension ExecutionContexts {
    /// Where one thread sleeps in its serving waits, and where work re-entering a thread-affine
    /// context it runs (A → B → A) is left for it.
    ///
    /// A thread that runs a thread-affine context's work and blocks until other work has run waits
    /// here (``LentWork/_blockingLend(_:spinningFor:to:sleeping:)``), not on the other side's condition: the
    /// work it waits for may need it to run a nested piece of A's work first, on A's thread.
    final class Parker: @unchecked Sendable {
        // Sendable: `requests` is guarded by `mutex`.
        private let mutex = PThreadMutex()
        private let changed = MonotonicCondition()
        private var requests = RingBuffer<LentWork>()

        /// Leaves `request` for the thread to run in its wait.
        func post(_ request: LentWork) {
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
            var next: LentWork?
            while !completion.isDone {
                next = requests.popFirst()
                if next == nil {
                    changed.wait(mutex)
                    continue
                }
                mutex.unlock()
                // Not blocked while it runs a nested request: a snapshot must not see this thread
                // waiting for work that waits for it (a false cycle), but running that request.
                ThreadActivity.labelled("a nested request") { next.take()!.run() }
                mutex.lock()
            }
            mutex.unlock()
        }
    }

    /// Whether the work a blocked caller lent has run, or came back unrun; wakes the caller's
    /// ``Parker`` when it has.
    fileprivate final class Completion: Sendable {
        private static let pending = 0, callerSleeps = 1, ran = 2, returnedUnrun = 3
        /// `pending`, then `ran` or `returnedUnrun`. A caller that stops spinning moves `pending`
        /// to `callerSleeps` under its parker's mutex before it sleeps, and ``finish(workRan:)``,
        /// finding that, wakes it under the same mutex: no wakeup is lost.
        private let phase = Atomic<Int>(Completion.pending)
        private let waiter: Parker

        /// A completion for the calling thread to wait for, on its own parker.
        init() {
            waiter = Record.currentOrNew().parker
        }

        var isDone: Bool { phase.load(ordering: .acquiring) >= Completion.ran }

        /// Whether the work ran; meaningful once done.
        var workRan: Bool { phase.load(ordering: .acquiring) == Completion.ran }

        /// Tells the caller that its work has run, or that it never will.
        func finish(workRan: Bool) {
            let previous = phase.exchange(workRan ? Completion.ran : Completion.returnedUnrun, ordering: .acquiringAndReleasing)
            if previous == Completion.callerSleeps { waiter.wake() }
        }

        /// Whether the caller may sleep: `false` once done. Parker's mutex held.
        func markCallerSleeps() -> Bool {
            phase.compareExchange(
                expected: Completion.pending, desired: Completion.callerSleeps, ordering: .acquiringAndReleasing
            ).exchanged
        }

        /// Blocks the caller until the work has run or come back: watches for `spin` first, then
        /// sleeps on its parker inside `sleeping` (given whether the wait is over), running the
        /// nested requests that come to it meanwhile.
        func _blockingWait(spinningFor spin: Duration, sleeping: LentWork.Sleeping) {
            if spin > .zero, spinBriefly(for: spin, until: { isDone }) { return }
            sleeping({ [self] in isDone }) { waiter._blockingServe(until: self) }
        }
    }

    /// A blocked caller's closure, lent to the thread that is to run it while the caller waits:
    /// how a dedicated thread's `sync`, a request for a thread-affine context's owner and a `sync`
    /// that waits serving run a caller's work on another thread. (A pool's `runAndWait` lends its
    /// caller's work its own way, as `BorrowedWork`.)
    ///
    /// The borrower holds the loan; the lender keeps only its ``Completion``. Running the loan,
    /// or letting go of it unrun (a target that drops its queue, a refused submission), finishes
    /// the completion, so the lender never waits for ever. The closure is released before the
    /// completion finishes: it never outlives the lender's wait (`withoutActuallyEscaping`
    /// checks that).
    final class LentWork: @unchecked Sendable {
        /// How a lender sleeps: given whether its wait is over (an atomic read) and the sleep.
        typealias Sleeping = (_ isOver: @escaping @Sendable () -> Bool, _ sleep: () -> Void) -> Void

        // Sendable without a lock: `work` is written once, in `init`, before the loan is shared,
        // and then read and cleared by one thread at a time: the borrowing thread in `run()`
        // (one borrower runs a loan, at most once), or `deinit`, which runs after the last
        // reference is gone, and so after any `run()` (releasing the reference is a release,
        // the last release's `deinit` an acquire, as for every class). The lender never touches
        // it; it waits on `completion`, whose atomic `phase` (acquiring and releasing) orders
        // everything the work did before the lender's wakeup.
        private var work: (() -> Void)?
        private let completion: Completion

        private init(_ work: @escaping () -> Void, _ completion: Completion) {
            self.work = work
            self.completion = completion
        }

        /// On the borrowing thread: runs the work, releases it, and wakes the lender.
        func run() {
            guard work != nil else { return }
            work.take()!()  // the closure, a temporary, is released before the lender wakes
            completion.finish(workRan: true)
        }

        deinit {
            guard work != nil else { return }
            work = nil
            completion.finish(workRan: false)
        }

        /// Lends `work` to `borrower`, which hands the loan on to the thread that is to run it,
        /// and blocks until that thread has run it or let go of it unrun: watches for `spin`
        /// first, then sleeps on the calling thread's ``Parker``, running the nested requests
        /// that come to it meanwhile.
        ///
        /// - Parameters:
        ///   - runsEveryLoan: Whether the borrower runs every loan it takes (a dedicated thread
        ///     does). The lender then holds the loan too, until its wait ends, so that the loan is
        ///     freed on the thread that allocated it: memory freed on another thread goes back
        ///     through the allocator's shared lock once that thread's own cache is full. Else the
        ///     borrower holds the only reference, and letting go of the loan unrun ends the wait.
        ///   - sleeping: Wraps the sleep, not the spin: where a caller that watches for a round
        ///     trip of a microsecond registers the wait only once it is a real one (see
        ///     ``ExecutionContexts/blocking(for:kind:isOver:_:)``, given whether the work has run).
        /// - Returns: Whether the work ran.
        /// - Throws: What `borrower` threw (a refusal); the work did not run.
        static func _blockingLend<Failure: Error>(
            _ work: () -> Void, spinningFor spin: Duration = .zero, runsEveryLoan: Bool = false,
            to borrower: (LentWork) throws(Failure) -> Void, sleeping: Sleeping = { _, sleep in sleep() }
        ) throws(Failure) -> Bool {
            try withoutActuallyEscaping(work) { (work) throws(Failure) -> Bool in
                let completion = Completion()
                var loan: LentWork? = LentWork(work, completion)
                try borrower(loan!)
                // Unless the borrower runs every loan, only what it handed the loan to holds it now.
                if !runsEveryLoan { loan = nil }
                completion._blockingWait(spinningFor: spin, sleeping: sleeping)
                // The closure was let go of by `run()`; only the object outlives the wait.
                withExtendedLifetime(loan) {}
                return completion.workRan
            }
        }
    }
}
