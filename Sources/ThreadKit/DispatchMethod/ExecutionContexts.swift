import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Something that runs one piece of work at a time: the main queue, a serial `DispatchQueue`, a
/// ``DedicatedThread``, a ``ThrottledQueue`` or a ``ThreadPool`` of size 1.
struct SerialContext: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Sendable {
        case main
        case queue(DispatchQueue)
        case thread(DedicatedThread)
        case throttled(ThrottledQueue)
        case pool(ThreadPool)
    }

    let kind: Kind
    private let id: ObjectIdentifier

    init(_ kind: Kind) {
        self.kind = kind
        switch kind {
        case .main: id = ObjectIdentifier(DispatchQueue.main)
        case .queue(let queue): id = ObjectIdentifier(queue)
        case .thread(let thread): id = ObjectIdentifier(thread)
        case .throttled(let queue): id = ObjectIdentifier(queue)
        case .pool(let pool): id = ObjectIdentifier(pool)
        }
    }

    static func == (lhs: SerialContext, rhs: SerialContext) -> Bool { lhs.id == rhs.id }

    func hash(into hasher: inout Hasher) { hasher.combine(id) }

    var description: String {
        switch kind {
        case .main: "the main queue"
        case .queue(let queue): "DispatchQueue \"\(queue.label)\""
        case .thread(let thread): "DedicatedThread \"\(thread.name)\""
        case .throttled(let queue): "ThrottledQueue \"\(queue.label)\""
        case .pool(let pool): "ThreadPool \"\(pool.name)\""
        }
    }

    /// The name alone, quoted, for the end of a deadlock message.
    var shortDescription: String {
        switch kind {
        case .main: "the main queue"
        case .queue(let queue): "\"\(queue.label)\""
        case .thread(let thread): "\"\(thread.name)\""
        case .throttled(let queue): "\"\(queue.label)\""
        case .pool(let pool): "\"\(pool.name)\""
        }
    }
}

/// The serial contexts each thread holds, and the blocked threads' waits: re-entry and deadlock
/// detection for every blocking wait in ThreadKit.
///
/// A thread holds a context while it runs that context's work, and also every context whose holder
/// is blocked waiting for the work it runs (a `sync` chain A → B → C hands A and B on to the thread
/// running C). Before blocking for a context:
/// 1. if the thread holds it, the work runs inline instead (re-entry; exclusion holds, because the
///    context's holder is blocked waiting for this thread);
/// 2. if waiting would close a cycle among blocked threads, the process stops with a message that
///    names the cycle (deadlock);
/// 3. otherwise the thread blocks.
///
/// A thread that holds nothing pays one thread-local read and never touches the shared registry:
/// it cannot be part of a cycle.
enum ExecutionContexts {
    /// The calling thread's held contexts, innermost last; empty for most threads.
    static var held: [SerialContext] {
        Record.current?.stack ?? []
    }

    /// Whether the calling thread holds `context`.
    static func holds(_ context: SerialContext) -> Bool {
        // The main thread is the only one that can run the main queue's work.
        if case .main = context.kind, Thread.isMainThread { return true }
        guard let record = Record.current else { return false }
        return record.stack.contains(context)
    }

    /// Runs `body` while the calling thread also holds `contexts` (a context's work, plus what its
    /// blocked waiter held).
    static func withHeld<T>(_ contexts: [SerialContext], _ body: () throws -> T) rethrows -> T {
        guard !contexts.isEmpty else { return try body() }
        let record = Record.currentOrNew()
        let depth = record.stack.count
        record.stack += contexts
        defer { record.stack.removeSubrange(depth...) }
        return try body()
    }

    /// Makes the calling thread hold `context` for the rest of its life: a dedicated thread or the
    /// thread of a one-thread pool runs nothing but that context's work.
    static func holdForever(_ context: SerialContext) {
        Record.currentOrNew().stack.append(context)
    }

    /// Runs `wait`, a blocking wait for work that `context` will run, after checking that it can
    /// end: stops the process if the wait would close a cycle of blocked threads.
    ///
    /// Call it only after the re-entry check (the thread does not hold `context`).
    static func blocking<T>(for context: SerialContext, _ wait: () throws -> T) rethrows -> T {
        guard let record = Record.current, !record.stack.isEmpty else { return try wait() }
        let thread = ThreadKey(record)
        Registry.shared.withLock { graph in
            if let cycle = graph.cycle(if: thread, holding: record.stack, waitsFor: context) {
                preconditionFailure(message(for: cycle))
            }
            graph.block(thread, holding: record.stack, waitingFor: context)
        }
        defer { Registry.shared.withLock { $0.unblock(thread) } }
        return try wait()
    }

    /// A thread in the registry: its record's identity, and its name for messages.
    struct ThreadKey: Equatable, Sendable {
        let id: ObjectIdentifier
        let name: String

        init(_ record: Record) {
            id = ObjectIdentifier(record)
            name = record.threadName
        }

        init(id: ObjectIdentifier, name: String) {
            self.id = id
            self.name = name
        }

        static func == (lhs: ThreadKey, rhs: ThreadKey) -> Bool { lhs.id == rhs.id }
    }

    /// `deadlock: thread "T1" holds DedicatedThread "db" and waits for ThrottledQueue "api", held by
    /// thread "T2", which waits for "db"`.
    static func message(for cycle: [WaitGraph<ThreadKey, SerialContext>.Hop]) -> String {
        let first = cycle[0]
        var text = "deadlock: thread \"\(first.thread.name)\" holds \(first.holds) and waits for \(first.waitsFor)"
        for hop in cycle.dropFirst() {
            let waitsFor = hop.waitsFor == first.holds ? hop.waitsFor.shortDescription : hop.waitsFor.description
            text += ", held by thread \"\(hop.thread.name)\", which waits for \(waitsFor)"
        }
        return text
    }

    /// The blocked threads that hold something, shared by all of them.
    private enum Registry {
        static let shared = Locked(WaitGraph<ThreadKey, SerialContext>())
    }

    /// One thread's held contexts, kept in a thread-specific slot from the first hold to the thread's end.
    final class Record {
        let threadName: String
        var stack: [SerialContext] = []

        private init() {
            threadName = NamedThread.currentName()
        }

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            let result = pthread_key_create(&key) { value in
                Unmanaged<Record>.fromOpaque(value!).release()
            }
            precondition(result == 0, "pthread_key_create failed with error \(result)")
            return key
        }()

        static var current: Record? {
            pthread_getspecific(key).map { Unmanaged<Record>.fromOpaque($0).takeUnretainedValue() }
        }

        static func currentOrNew() -> Record {
            if let record = current { return record }
            let record = Record()
            pthread_setspecific(key, Unmanaged.passRetained(record).toOpaque())
            return record
        }
    }
}
