import Testing
@testable import ThreadKitRedis

@Suite("ReplyPipeline: which command a reply, a deadline or a loss concerns")
struct ReplyPipelineTests {
    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("replies answer the written commands in the order they were enqueued; their bytes go out once, in order")
    func inOrder() {
        var pipeline = ReplyPipeline<String>()
        for name in ["a", "b", "c"] { _ = pipeline.enqueue(name, bytes: bytes(name), deadline: .seconds(1)) }
        #expect(pipeline.dueCount == 0)
        guard case .unexpected = pipeline.reply(at: .zero) else { Issue.record("nothing was written yet"); return }
        #expect(pipeline.takeUnsent(at: .zero) == bytes("abc"))
        #expect(pipeline.takeUnsent(at: .zero).isEmpty)
        var answered: [String] = []
        for _ in 0..<3 {
            guard case .answers(let entry) = pipeline.reply(at: .zero) else { Issue.record("no answer"); return }
            #expect(entry.sent)
            answered.append(entry.waiter)
        }
        #expect(answered == ["a", "b", "c"])
        #expect(pipeline.count == 0)
        guard case .unexpected = pipeline.reply(at: .zero) else { Issue.record("a reply with nothing due must be unexpected"); return }
    }

    @Test("many commands answered as they go keep their order across the internal compaction")
    func longRun() {
        var pipeline = ReplyPipeline<Int>()
        var next = 0
        var answered: [Int] = []
        for round in 0..<1_000 {
            for _ in 0..<(round % 5) {
                _ = pipeline.enqueue(next, bytes: [], deadline: .seconds(1))
                next += 1
            }
            _ = pipeline.takeUnsent(at: .zero)
            for _ in 0..<(round % 3) where pipeline.dueCount > 0 {
                if case .answers(let entry) = pipeline.reply(at: .zero) { answered.append(entry.waiter) }
            }
        }
        while pipeline.dueCount > 0, case .answers(let entry) = pipeline.reply(at: .zero) { answered.append(entry.waiter) }
        #expect(answered == Array(0..<next))
    }

    @Test("a sent command past its deadline fails, stays in line abandoned, and its late reply is discarded, not given to the next command")
    func abandonedReplyDiscarded() {
        var pipeline = ReplyPipeline<String>()
        _ = pipeline.enqueue("slow", bytes: bytes("1"), deadline: .milliseconds(100))
        _ = pipeline.takeUnsent(at: .zero)
        _ = pipeline.enqueue("next", bytes: bytes("2"), deadline: .milliseconds(150))
        #expect(pipeline.expire(at: .milliseconds(99)).isEmpty)
        let expired = pipeline.expire(at: .milliseconds(100))
        #expect(expired.map(\.waiter) == ["slow"] && expired.map(\.sent) == [true])
        #expect(pipeline.abandonedCount == 1 && pipeline.dropReason(at: .milliseconds(100)) == nil)
        // Expiring again finds nothing new.
        #expect(pipeline.expire(at: .milliseconds(100)).isEmpty)
        #expect(pipeline.takeUnsent(at: .milliseconds(110)) == bytes("2"))
        guard case .discarded = pipeline.reply(at: .milliseconds(120)) else { Issue.record("the slow reply must be discarded"); return }
        guard case .answers(let entry) = pipeline.reply(at: .milliseconds(121)) else { Issue.record("the next reply answers 'next'"); return }
        #expect(entry.waiter == "next" && pipeline.abandonedCount == 0 && pipeline.count == 0)
    }

    @Test("a command past its deadline before it was written is taken back: its bytes never go out, and it says it was not sent")
    func unsentExpiryTakenBack() {
        var pipeline = ReplyPipeline<String>()
        _ = pipeline.enqueue("a", bytes: bytes("a"), deadline: .milliseconds(100))
        _ = pipeline.enqueue("b", bytes: bytes("b"), deadline: .milliseconds(200))
        let expired = pipeline.expire(at: .milliseconds(100))
        #expect(expired.map(\.waiter) == ["a"] && expired.map(\.sent) == [false])
        #expect(pipeline.abandonedCount == 0 && pipeline.count == 1)
        #expect(pipeline.takeUnsent(at: .milliseconds(150)) == bytes("b"))
        guard case .answers(let entry) = pipeline.reply(at: .milliseconds(160)) else { Issue.record("b is answered"); return }
        #expect(entry.waiter == "b")
    }

    @Test("the next deadline is the first live command's; abandoned ones wait only on the connection-level deadline")
    func nextDeadline() {
        var pipeline = ReplyPipeline<Int>(connectionTimeout: .seconds(1))
        #expect(pipeline.nextDeadline == nil)
        _ = pipeline.enqueue(1, bytes: [], deadline: .milliseconds(100))
        #expect(pipeline.nextDeadline == .milliseconds(100))
        _ = pipeline.takeUnsent(at: .milliseconds(10))
        _ = pipeline.enqueue(2, bytes: [], deadline: .milliseconds(300))
        #expect(pipeline.nextDeadline == .milliseconds(100))
        _ = pipeline.expire(at: .milliseconds(100))
        #expect(pipeline.nextDeadline == .milliseconds(300))
        _ = pipeline.expire(at: .milliseconds(300))
        // Only the unsent one went; the abandoned first one waits for its reply until 10 ms + 1 s.
        #expect(pipeline.count == 1 && pipeline.nextDeadline == .milliseconds(1_010))
    }

    @Test("the connection must go when more than maxAbandoned replies are overdue")
    func tooManyAbandoned() {
        var pipeline = ReplyPipeline<Int>(maxAbandoned: 2, connectionTimeout: .seconds(60))
        for index in 0..<3 { _ = pipeline.enqueue(index, bytes: [], deadline: .milliseconds(100 + index)) }
        _ = pipeline.takeUnsent(at: .zero)
        _ = pipeline.expire(at: .milliseconds(101))
        #expect(pipeline.abandonedCount == 2 && pipeline.dropReason(at: .milliseconds(101)) == nil)
        _ = pipeline.expire(at: .milliseconds(102))
        #expect(pipeline.dropReason(at: .milliseconds(102)) == "3 commands timed out with their replies still due")
    }

    @Test("the connection must go when nothing was read for the connection timeout while replies are due; each reply restarts that count")
    func stalledConnection() {
        var pipeline = ReplyPipeline<Int>(connectionTimeout: .seconds(1))
        #expect(pipeline.dropReason(at: .seconds(100)) == nil)
        _ = pipeline.enqueue(1, bytes: [], deadline: .seconds(60))
        _ = pipeline.enqueue(2, bytes: [], deadline: .seconds(60))
        _ = pipeline.takeUnsent(at: .seconds(10))
        #expect(pipeline.dropReason(at: .milliseconds(10_999)) == nil)
        _ = pipeline.reply(at: .milliseconds(10_999))
        #expect(pipeline.dropReason(at: .milliseconds(11_500)) == nil)
        #expect(pipeline.dropReason(at: .milliseconds(11_999)) == "nothing was read for 1.0 seconds with 1 replies due")
        _ = pipeline.reply(at: .seconds(12))
        #expect(pipeline.dropReason(at: .seconds(100)) == nil)
    }

    @Test("a lost connection hands back the live commands, oldest first, not the abandoned ones, and forgets them all")
    func lost() {
        var pipeline = ReplyPipeline<String>()
        _ = pipeline.enqueue("a", bytes: [], deadline: .milliseconds(10))
        _ = pipeline.enqueue("b", bytes: [], deadline: .milliseconds(50))
        _ = pipeline.takeUnsent(at: .zero)
        _ = pipeline.enqueue("c", bytes: [], deadline: .milliseconds(60))
        _ = pipeline.expire(at: .milliseconds(10))
        let entries = pipeline.takeAll()
        #expect(entries.map(\.waiter) == ["b", "c"] && entries.map(\.sent) == [true, false])
        #expect(pipeline.count == 0 && pipeline.abandonedCount == 0 && pipeline.takeAll().isEmpty)
        guard case .unexpected = pipeline.reply(at: .milliseconds(20)) else { Issue.record("nothing is due after a loss"); return }
    }
}
