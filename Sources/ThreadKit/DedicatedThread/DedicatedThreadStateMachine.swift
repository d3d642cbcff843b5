/// The decisions of a ``DedicatedThread``: whether it takes work, what its one thread does next,
/// and whether anyone must wake it.
///
/// A pure value type, as swift-nio's `NIOThreadPool` state and AsyncHTTPClient's state machines
/// are: the core feeds it events under its lock (`mutating func event(...) -> Action`) and carries
/// out the answer. It holds the queue but no lock, no thread and no clock: the core says how long
/// the thread slept. Tests drive it through every state with made-up items and durations.
///
/// Its state is two enums, so that no combination that cannot happen can be written: the
/// ``Lifecycle`` (taking work, paused, disposing), and, while the thread lives, its ``Activity``
/// (working, spinning, sleeping); then ``State/exited``, or ``State/failedToStart(errno:)``.
///
/// The batch: the thread takes the whole queue in one step and runs it item by item under a lock
/// of the core's own, which submitters never take. The events that touch the batch too are given
/// it (the core holds that lock while they run): ``pause(batch:)`` moves it back to the front of
/// the queue, so that the thread, finding its batch empty after the item running now, comes here
/// and sleeps; ``disposeNow(batch:dropping:)`` drops from it.
struct DedicatedThreadStateMachine<Item> {
    /// Whether the thread takes and runs work.
    enum Lifecycle: Equatable {
        /// Takes work and runs it.
        case accepting
        /// Takes work; starts none until resumed.
        case paused
        /// Disposed: refuses work, runs what is queued, then exits.
        case disposing
    }

    /// What the living thread does.
    enum Activity: Equatable {
        /// Runs its batch, or is about to ask what next.
        case working
        /// Watches the core's hand-off word before it sleeps; `nudged` once someone has closed it.
        case spinning(nudged: Bool)
        /// Sleeps on the core's condition: for work (`forWork`), or because it is paused;
        /// `signalled` once someone has signalled it.
        case sleeping(forWork: Bool, signalled: Bool)
    }

    enum State: Equatable {
        case alive(Lifecycle, Activity)
        /// The thread has exited, after a dispose and the queue's last item.
        case exited
        /// The system refused to start the thread.
        case failedToStart(errno: Int32)
    }

    /// How the core makes the thread look again.
    enum Wake: Equatable {
        /// It needs no wakeup: it works, or was woken already.
        case none
        /// Signal the condition it sleeps on.
        case signal
        /// Close the hand-off word it watches (see ``DedicatedThreadCore``).
        case nudge
    }

    /// What the thread does once its batch is empty.
    enum ThreadStep: Equatable {
        /// Run the batch, just refilled from the queue.
        case runBatch
        /// Watch the hand-off word for this long, then report ``spinEnded(refilling:ranHandedOver:)``.
        case spin(Duration)
        /// Sleep on the condition, then report ``threadWokeUp(afterSleeping:refilling:)``.
        case sleep
        /// Exit: disposed, and nothing is left to run.
        case exit
    }

    /// What ``disposeNow(batch:dropping:)`` did.
    struct Dropping {
        /// The items dropped, the batch's first.
        var dropped: [Item]
        var wake: Wake
    }

    /// The thread's name, for refusals.
    let name: String
    private(set) var state = State.alive(.accepting, .working)
    /// The items submitted and not yet taken by the thread, oldest first.
    private(set) var queue = RingBuffer<Item>()
    /// How long the thread spins for work before it sleeps, learned from its sleeps.
    private(set) var spinBudget: SpinBudget

    /// A thread that takes work and runs it; `spinCeiling` is its longest spin.
    init(name: String, spinCeiling: Duration) {
        self.name = name
        spinBudget = SpinBudget(ceiling: spinCeiling)
    }

    var isPaused: Bool { lifecycle == .paused }

    /// The thread is gone, or never started.
    var hasExited: Bool {
        switch state {
        case .alive: false
        case .exited, .failedToStart: true
        }
    }

    private var lifecycle: Lifecycle? {
        if case .alive(let lifecycle, _) = state { lifecycle } else { nil }
    }

    // MARK: - Submitters and controllers

    /// The system refused to start the thread: every submission is refused from now on.
    mutating func threadFailedToStart(errno: Int32) {
        precondition(state == .alive(.accepting, .working) && queue.isEmpty, "thread start reported twice or late: \(state)")
        state = .failedToStart(errno: errno)
    }

    /// The refusal a submission meets now: that of a disposed thread, or of one that never
    /// started; `nil` while it takes work, paused or not. A `sync` caller meets it when it
    /// submits, before it could register a wait, so that a refusal comes first.
    var refusal: DedicatedThreadError? {
        switch state {
        case .alive(.accepting, _), .alive(.paused, _): nil
        case .alive(.disposing, _), .exited: .disposed(name: name)
        case .failedToStart(let errno): .threadStartFailed(name: name, errno: errno)
        }
    }

    /// Queues `item`.
    ///
    /// - Returns: The wakeup the thread needs; none while paused.
    /// - Throws: ``refusal``, if there is one.
    mutating func submit(_ item: Item) throws(DedicatedThreadError) -> Wake {
        if let refusal { throw refusal }
        queue.append(item)
        return isPaused ? .none : wake()
    }

    /// Starts nothing after the item running now: the rest of the batch goes back to the front
    /// of the queue, and so does the item handed to the spinning thread and not yet taken, which
    /// `takeHandedOver` gives back (see ``spinEnded(refilling:ranHandedOver:)``; the batch is
    /// empty while the thread spins). Only a thread that takes work pauses; `takeHandedOver` is
    /// called only then.
    mutating func pause(batch: inout RingBuffer<Item>, takeHandedOver: () -> Item? = { nil }) {
        guard case .alive(.accepting, let activity) = state else { return }
        state = .alive(.paused, activity)
        swap(&batch, &queue)
        if let handedOver = takeHandedOver() { queue.append(handedOver) }
        while let item = batch.popFirst() { queue.append(item) }
    }

    /// Lets a paused thread run its queue again.
    mutating func resume() -> Wake {
        guard case .alive(.paused, let activity) = state else { return .none }
        state = .alive(.accepting, activity)
        return queue.isEmpty ? .none : wake()
    }

    /// ``DedicatedThread/dispose()``: refuses new work; the thread runs what is queued (a paused
    /// one resumes to do so), then exits.
    mutating func dispose() -> Wake {
        switch state {
        case .alive(.accepting, let activity), .alive(.paused, let activity):
            state = .alive(.disposing, activity)
            return wake()
        case .alive(.disposing, _), .exited, .failedToStart:
            return .none
        }
    }

    /// ``DedicatedThread/disposeNow()``: refuses new work and drops the queued items that
    /// `isDroppable` picks (the batch's first); the thread runs the rest, then exits.
    mutating func disposeNow(batch: inout RingBuffer<Item>, dropping isDroppable: (Item) -> Bool) -> Dropping {
        guard case .alive(_, let activity) = state else { return Dropping(dropped: [], wake: .none) }
        state = .alive(.disposing, activity)
        let dropped = batch.removeAll(where: isDroppable) + queue.removeAll(where: isDroppable)
        return Dropping(dropped: dropped, wake: wake())
    }

    /// The wakeup that makes the thread look at the state again, once per spin or sleep.
    private mutating func wake() -> Wake {
        guard case .alive(let lifecycle, let activity) = state else { return .none }
        switch activity {
        case .working, .spinning(nudged: true), .sleeping(_, signalled: true):
            return .none
        case .spinning(nudged: false):
            state = .alive(lifecycle, .spinning(nudged: true))
            return .nudge
        case .sleeping(let forWork, signalled: false):
            state = .alive(lifecycle, .sleeping(forWork: forWork, signalled: true))
            return .signal
        }
    }

    // MARK: - The thread

    /// The thread has run its batch (`batch` is empty): the next step, refilling `batch` from the
    /// queue if there is work to run.
    mutating func threadRanOutOfWork(refilling batch: inout RingBuffer<Item>) -> ThreadStep {
        guard case .alive(let lifecycle, .working) = state else { preconditionFailure("the thread ran out of work while \(state)") }
        return nextStep(lifecycle, refilling: &batch, maySpin: true)
    }

    /// The thread's spin has ended, nudged or not: the next step, which is never another spin
    /// unless the spin ended with an item handed straight to the thread, which it has run
    /// (`ranHandedOver`): it then ran out of work again, as after a batch.
    ///
    /// The hand-over is the core's: while the thread spins with nothing queued, one submitter
    /// may give it an item without the lock. That item is older than anything queued after it,
    /// so the queue's order holds; a wakeup meanwhile is answered here, as any nudge is.
    mutating func spinEnded(refilling batch: inout RingBuffer<Item>, ranHandedOver: Bool = false) -> ThreadStep {
        guard case .alive(let lifecycle, .spinning) = state else { preconditionFailure("a spin ended while \(state)") }
        return nextStep(lifecycle, refilling: &batch, maySpin: ranHandedOver)
    }

    /// The thread woke up after `slept` (signalled or not): the next step. A sleep for work
    /// teaches the spin budget how soon work came.
    mutating func threadWokeUp(afterSleeping slept: Duration, refilling batch: inout RingBuffer<Item>) -> ThreadStep {
        guard case .alive(let lifecycle, .sleeping(let forWork, _)) = state else { preconditionFailure("the thread woke up while \(state)") }
        if forWork { spinBudget.slept(for: slept) }
        return nextStep(lifecycle, refilling: &batch, maySpin: true)
    }

    private mutating func nextStep(_ lifecycle: Lifecycle, refilling batch: inout RingBuffer<Item>, maySpin: Bool) -> ThreadStep {
        precondition(batch.isEmpty, "the thread asked for work with \(batch.count) items left in its batch")
        if lifecycle == .paused {
            state = .alive(.paused, .sleeping(forWork: false, signalled: false))
            return .sleep
        }
        if !queue.isEmpty {
            swap(&batch, &queue)
            state = .alive(lifecycle, .working)
            return .runBatch
        }
        if lifecycle == .disposing {
            state = .exited
            return .exit
        }
        if maySpin, spinBudget.current > .zero {
            state = .alive(.accepting, .spinning(nudged: false))
            return .spin(spinBudget.current)
        }
        state = .alive(.accepting, .sleeping(forWork: true, signalled: false))
        return .sleep
    }
}
