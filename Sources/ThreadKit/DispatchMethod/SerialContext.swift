import Dispatch

/// Something that runs one piece of work at a time: the main queue, a serial `DispatchQueue`, a
/// ``DedicatedThread``, a ``ThrottledQueue`` or a ``ThreadPool`` of size 1.
struct SerialContext: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Sendable {
        case main
        case queue(DispatchQueue)
        /// A dedicated thread's core, which its thread holds: never the ``DedicatedThread`` itself,
        /// which the thread must not keep alive.
        case thread(DedicatedThreadCore)
        case throttled(ThrottledQueue)
        /// The turn of the tasks nested in one running task of a throttled queue (its `sync` and
        /// `run` calls on the same queue): the concurrent child tasks of `run`'s work take it one
        /// at a time. Held by the thread or task that runs such a nested task.
        case nestedTurn(ThrottledQueue.Hold)
        case pool(ThreadPool)
    }

    let kind: Kind
    /// The identity of the thing that runs the context's work: what equality and hashing compare.
    let id: ObjectIdentifier
    /// For a throttled queue held by running one of its tasks: that task's hold, so that a thread
    /// the context is handed on to nests its own calls on the queue in that task, as the holder
    /// would. Not part of the identity.
    let throttleHold: ThrottledQueue.Hold?

    init(_ kind: Kind, hold: ThrottledQueue.Hold? = nil) {
        self.kind = kind
        throttleHold = hold
        switch kind {
        case .main: id = MainQueue.identity
        case .queue(let queue): id = ObjectIdentifier(queue)
        case .thread(let thread): id = ObjectIdentifier(thread)
        case .throttled(let queue): id = ObjectIdentifier(queue)
        case .nestedTurn(let holder): id = ObjectIdentifier(holder)
        case .pool(let pool): id = ObjectIdentifier(pool)
        }
    }

    static func == (lhs: SerialContext, rhs: SerialContext) -> Bool { lhs.id == rhs.id }

    /// Whether the context's work must run on one particular thread: a dedicated thread's on that
    /// thread, a queue's on the thread that runs inside the queue (where `getSpecific` and an
    /// actor's isolation check see it). A pool of size 1 and a throttled queue only promise one
    /// piece of work at a time, wherever it runs.
    var isThreadAffine: Bool {
        switch kind {
        case .main, .queue, .thread: true
        case .throttled, .nestedTurn, .pool: false
        }
    }

    func hash(into hasher: inout Hasher) { hasher.combine(id) }

    /// `DedicatedThread "db"`: what the context is and the name its user gave it, as messages say it.
    var description: String {
        named.map { "\($0.kind) \"\($0.label)\"" } ?? "the main queue"
    }

    /// The name alone, quoted, for the end of a deadlock message.
    var shortDescription: String {
        named.map { "\"\($0.label)\"" } ?? "the main queue"
    }

    /// What kind of thing the context is, and its label; `nil` for the main queue, which has no
    /// label. The one naming table: deadlock messages and ``DispatchTarget/description`` use it.
    var named: (kind: String, label: String)? {
        switch kind {
        case .main: nil
        case .queue(let queue): ("DispatchQueue", queue.label)
        case .thread(let thread): ("DedicatedThread", thread.name)
        case .throttled(let queue): ("ThrottledQueue", queue.label)
        // Named as its queue: waiting for the nested turn is waiting for the queue, to its user.
        case .nestedTurn(let holder): ("ThrottledQueue", holder.queue.label)
        case .pool(let pool): ("ThreadPool", pool.name)
        }
    }
}

/// The main queue's one identity, and whether the calling code runs on it.
///
/// On Linux every read of `DispatchQueue.main` makes a new wrapper object, so neither its identity
/// nor the thread tells the main queue apart: after `dispatchMain()` its work runs on worker
/// threads, and a freed wrapper's address is soon another queue's. As libdispatch-based libraries
/// do, the main queue carries a specific of ours, which only code running on it sees.
enum MainQueue {
    /// Stands for the main queue: the object whose identity a main-queue context has.
    private final class Marker: Sendable {}

    private static let marker = Marker()

    /// The identity of every ``SerialContext`` of the main queue.
    static let identity = ObjectIdentifier(marker)

    /// Set on the main queue once, on first use; libdispatch's specifics are thread-safe.
    private static let key: DispatchSpecificKey<Marker> = {
        let key = DispatchSpecificKey<Marker>()
        DispatchQueue.main.setSpecific(key: key, value: marker)
        return key
    }()

    /// Whether the calling code runs on the main queue: on the main thread before `dispatchMain()`
    /// (libdispatch counts its code as the main queue's), or in main-queue work, wherever it runs.
    static var isCurrent: Bool {
        DispatchQueue.getSpecific(key: key) != nil
    }
}
