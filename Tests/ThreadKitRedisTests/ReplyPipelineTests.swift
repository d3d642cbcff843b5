import Testing
@testable import ThreadKitRedis

@Suite("ReplyPipeline: which command a reply, a timeout or a loss concerns")
struct ReplyPipelineTests {
    @Test("replies answer the commands in the order they were enqueued")
    func inOrder() {
        var pipeline = ReplyPipeline<String>()
        let generation = pipeline.connected()
        for name in ["a", "b", "c"] {
            let id = pipeline.enqueue(name, on: generation)!
            let marked = pipeline.markSent(id)
            #expect(marked)
        }
        var answered: [String] = []
        for _ in 0..<3 {
            guard case .answers(let entry) = pipeline.reply(on: generation) else { Issue.record("no answer"); return }
            answered.append(entry.waiter)
        }
        #expect(answered == ["a", "b", "c"])
        #expect(pipeline.count == 0)
        guard case .unexpected = pipeline.reply(on: generation) else { Issue.record("a reply with nothing in flight must be unexpected"); return }
    }

    @Test("many commands answered as they go keep their order across the internal compaction")
    func longRun() {
        var pipeline = ReplyPipeline<Int>()
        let generation = pipeline.connected()
        var next = 0
        var answered: [Int] = []
        for round in 0..<1_000 {
            for _ in 0..<(round % 5) {
                _ = pipeline.enqueue(next, on: generation)
                next += 1
            }
            for _ in 0..<(round % 3) where pipeline.count > 0 {
                if case .answers(let entry) = pipeline.reply(on: generation) { answered.append(entry.waiter) }
            }
        }
        while pipeline.count > 0, case .answers(let entry) = pipeline.reply(on: generation) { answered.append(entry.waiter) }
        #expect(answered == Array(0..<next))
    }

    @Test("a timeout fails its command, hands back the others oldest first, and forgets the connection")
    func timeout() {
        var pipeline = ReplyPipeline<String>()
        let generation = pipeline.connected()
        let a = pipeline.enqueue("a", on: generation)!
        let b = pipeline.enqueue("b", on: generation)!
        _ = pipeline.enqueue("c", on: generation)!
        _ = pipeline.markSent(a)
        _ = pipeline.markSent(b)
        guard let (command, others) = pipeline.timedOut(b) else { Issue.record("b is in flight"); return }
        #expect(command.waiter == "b" && command.sent)
        #expect(others.map(\.waiter) == ["a", "c"] && others.map(\.sent) == [true, false])
        #expect(!pipeline.isConnected && pipeline.count == 0)
        // What the old connection says afterwards is stale; a late timeout finds nothing.
        guard case .stale = pipeline.reply(on: generation) else { Issue.record("a reply on a dropped connection is stale"); return }
        let late = pipeline.timedOut(a)
        let lost = pipeline.lost(generation)
        let enqueued = pipeline.enqueue("d", on: generation)
        #expect(late == nil && lost.isEmpty && enqueued == nil)
    }

    @Test("a command that timed out before it was written is not marked sent, and must not be written")
    func timeoutBeforeWrite() {
        var pipeline = ReplyPipeline<String>()
        let generation = pipeline.connected()
        let id = pipeline.enqueue("a", on: generation)!
        let timedOut = pipeline.timedOut(id)
        #expect(timedOut?.command.sent == false)
        let marked = pipeline.markSent(id)
        #expect(!marked)
    }

    @Test("an answered command's timeout finds nothing")
    func answeredThenTimeout() {
        var pipeline = ReplyPipeline<String>()
        let generation = pipeline.connected()
        let id = pipeline.enqueue("a", on: generation)!
        _ = pipeline.reply(on: generation)
        let timedOut = pipeline.timedOut(id)
        #expect(timedOut == nil && pipeline.isConnected)
    }

    @Test("a lost connection hands back every command in flight; a new connection starts a new generation")
    func lostAndReconnected() {
        var pipeline = ReplyPipeline<String>()
        let first = pipeline.connected()
        _ = pipeline.enqueue("a", on: first)
        _ = pipeline.enqueue("b", on: first)
        _ = pipeline.reply(on: first)
        let lost = pipeline.lost(first)
        let lostAgain = pipeline.lost(first)
        #expect(lost.map(\.waiter) == ["b"] && lostAgain.isEmpty)
        let second = pipeline.connected()
        let onOld = pipeline.enqueue("x", on: first)
        #expect(second != first && onOld == nil)
        let id = pipeline.enqueue("c", on: second)!
        guard case .stale = pipeline.reply(on: first) else { Issue.record("the old generation's reply is stale"); return }
        let lostOld = pipeline.lost(first)
        #expect(lostOld.isEmpty && pipeline.count == 1)
        let withdrawn = pipeline.withdraw(id)
        #expect(withdrawn?.waiter == "c" && pipeline.count == 0)
    }
}
