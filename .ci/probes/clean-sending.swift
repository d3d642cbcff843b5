// Work that runs once is `sending`, and ThrottledQueue.run's work runs on the caller's actor: code on
// an actor hands over a non-Sendable value it made, or uses its own state. Compiles with no
// diagnostic (.ci/compile-probes checks it); with `@Sendable` closures, every call below is an error.
import ThreadKit

/// Not Sendable: a value an actor makes and hands over.
final class Draft {
    var lines: [String] = []
}

actor Editor {
    let pool: ThreadPool
    let thread: DedicatedThread
    let queue: ThrottledQueue
    var saved = 0

    init(pool: ThreadPool, thread: DedicatedThread, queue: ThrottledQueue) {
        self.pool = pool
        self.thread = thread
        self.queue = queue
    }

    func renderOnPool() async throws -> Int {
        let draft = Draft()
        draft.lines.append("title")
        return try await pool.run { draft.lines.append("rendered"); return draft.lines.count }
    }

    func saveOnThread() async throws -> Int {
        let draft = Draft()
        return try await thread.run { draft.lines.append("saved"); return draft.lines.count }
    }

    func dispatch() async throws -> Int {
        let draft = Draft()
        return try await DispatchMethod.async(on: .pool(pool)).run { draft.lines.append("sent"); return draft.lines.count }
    }

    func throttledSave() async throws -> Int {
        try await queue.run {
            saved += 1          // the actor's own state: the work runs on this actor
            return saved
        }
    }

    func throttledDraft() async throws -> Draft {
        let draft = Draft()
        return try await queue.run {   // a non-Sendable result stays on the actor
            draft.lines.append("queued")
            return draft
        }
    }
}
