import Foundation
import Testing
@testable import ThreadKit

// Work that runs once takes a `sending` closure, and ThrottledQueue.run's work runs on the
// caller's actor. This file compiles only with those signatures: with `@Sendable` closures, each
// closure below that captures `draft` (not Sendable) or the actor's `saved` is an error.

/// Not Sendable: a value an actor makes and hands over to work that runs elsewhere.
private final class Draft {
    var lines: [String] = []
}

private actor Editor {
    let pool = ThreadPool(name: "SndP", size: 2)
    let thread = DedicatedThread(name: KernelThreads.uniqueName("SndT"))
    let queue = ThrottledQueue(label: "Sending", interval: .zero)
    var saved = 0

    /// ThreadPool.run: the draft goes to a pool thread, and its lines come back.
    func renderOnPool() async throws -> [String] {
        let draft = Draft()
        draft.lines.append("title")
        return try await pool.run {
            draft.lines.append("rendered on \(foundationThreadName() ?? "?")")
            return draft.lines
        }
    }

    /// DedicatedThread.run: the draft goes to the thread.
    func saveOnThread() async throws -> [String] {
        let draft = Draft()
        let thread = thread
        return try await thread.run {
            draft.lines.append("saved, on its thread: \(thread.isCurrent)")
            return draft.lines
        }
    }

    /// DispatchMethod.run: the draft goes to the method's target.
    func dispatch() async throws -> [String] {
        let draft = Draft()
        let pool = pool
        return try await DispatchMethod.async(on: .pool(pool)).run {
            draft.lines.append("dispatched, on the pool: \(pool.isCurrentThreadMember)")
            return draft.lines
        }
    }

    /// ThrottledQueue.run: the work uses the actor's own state, and runs on the actor.
    func throttledSave() async throws -> Int {
        try await queue.run {
            self.assertIsolated()
            saved += 1
            return saved
        }
    }

    /// ThrottledQueue.run: a non-Sendable result stays on the actor.
    func throttledDraft() async throws -> [String] {
        let draft = Draft()
        let result: Draft = try await queue.run {
            draft.lines.append("queued")
            return draft
        }
        return result.lines
    }

    func shutDown() async {
        pool.dispose()
        thread.dispose()
        await pool.awaitTermination()
        await thread.awaitTermination()
    }
}

@Suite("sending work: an actor hands over what it made, or uses its own state in ThrottledQueue.run", .timeLimit(.minutes(1)))
struct SendingWorkTests {
    @Test("ThreadPool.run, DedicatedThread.run and DispatchMethod.run take a non-Sendable value the actor made, and run once where they should")
    func sendingClosuresRunElsewhere() async throws {
        let editor = Editor()
        let rendered = try await editor.renderOnPool()
        #expect(rendered.count == 2)
        #expect(rendered.first == "title")
        #expect(rendered.last?.hasPrefix("rendered on SndP Thread") == true, "\(rendered)")
        #expect(try await editor.saveOnThread() == ["saved, on its thread: true"])
        #expect(try await editor.dispatch() == ["dispatched, on the pool: true"])
        await editor.shutDown()
    }

    @Test("ThrottledQueue.run's work runs on the calling actor and may change its state; throttled like any task")
    func throttledRunOnTheActor() async throws {
        let editor = Editor()
        var results: [Int] = []
        for _ in 0..<5 { results.append(try await editor.throttledSave()) }
        #expect(results == [1, 2, 3, 4, 5])
        #expect(await editor.saved == 5)
        #expect(try await editor.throttledDraft() == ["queued"])
        await editor.shutDown()
    }
}
