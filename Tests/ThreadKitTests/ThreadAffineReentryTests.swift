import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// A serial `DispatchQueue` that tells whether the calling code runs inside it (`getSpecific`).
final class MarkedQueue: @unchecked Sendable {
    // Sendable: every property is constant, and a queue's specifics are thread-safe.
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Int>()

    init(_ label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: 1)
    }

    /// Whether the calling code runs inside the queue.
    var isInside: Bool { DispatchQueue.getSpecific(key: key) == 1 }
}

/// Rule 1 of re-entry for thread-affine contexts: work for a `DedicatedThread` reached again
/// through other contexts (A → B → A) runs on A's own thread, which serves it while it is blocked
/// in its `sync`; work for a serial queue runs on the thread that holds the queue, inside it.
@Suite("Re-entry runs a thread-affine context's work on its own thread", .timeLimit(.minutes(1)))
struct ThreadAffineReentryTests {
    /// One level of a nesting: a dedicated thread (entered with `DedicatedThread.sync`), a serial
    /// queue (entered with `DispatchMethod.sync(on: .serialQueue(_:))`), or a pool of two threads
    /// (entered with `DispatchMethod.sync(on: .pool(_:))`).
    enum Level: Sendable {
        case thread(DedicatedThread)
        case queue(MarkedQueue)
        case pool(ThreadPool)

        /// Whether the calling code runs on this level's context.
        var isCurrent: Bool {
            switch self {
            case .thread(let thread): thread.isCurrent
            case .queue(let queue): queue.isInside
            case .pool(let pool): pool.isCurrentThreadMember
            }
        }

        func enter<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
            switch self {
            case .thread(let thread):
                return thread.sync(body)
            case .queue(let queue):
                return try! DispatchMethod.sync(on: .serialQueue(queue.queue)).execute(body).wait()
            case .pool(let pool):
                return try! DispatchMethod.sync(on: .pool(pool)).execute(body).wait()
            }
        }
    }

    /// Enters `levels` one inside the other; each level records whether it runs on its own context.
    static func nest(_ levels: ArraySlice<Level>) -> [Bool] {
        guard let level = levels.first else { return [] }
        return level.enter { [level.isCurrent] + nest(levels.dropFirst()) }
    }


    /// The levels a pattern names: `A`, `B`, `C` dedicated threads, `Q`, `R` serial queues, `P` a
    /// pool of two threads; and what disposes the threads and the pool.
    static func levels(_ pattern: String, prefix: String) -> (levels: [Level], dispose: @Sendable () -> Void) {
        var threads: [Character: DedicatedThread] = [:]
        var queues: [Character: MarkedQueue] = [:]
        let pool = ThreadPool(name: KernelThreads.uniqueName("RAP"), size: 2)
        let levels = pattern.map { letter -> Level in
            if letter == "P" { return .pool(pool) }
            if "ABC".contains(letter) {
                let thread = threads[letter] ?? DedicatedThread(name: KernelThreads.uniqueName("\(prefix)\(letter)"))
                threads[letter] = thread
                return .thread(thread)
            }
            let queue = queues[letter] ?? MarkedQueue("\(prefix).\(letter)")
            queues[letter] = queue
            return .queue(queue)
        }
        let made = Array(threads.values)
        return (levels, {
            for thread in made { thread.dispose() }
            pool.dispose()
        })
    }

    @Test(
        "Each level of a nesting runs on its own context, the re-entered ones too",
        arguments: [
            "AB", "AQ", "QA", "ABA", "ABAB", "ABCA", "ABCAB", "QAQ", "AQA", "QRQ", "QAQA", "AQAQ", "QRQR", "AQBA", "QABQ",
            "APA", "QPQ", "APBPA",
        ])
    func nestedLevelsRunOnTheirOwnContext(pattern: String) async throws {
        let (levels, dispose) = Self.levels(pattern, prefix: "RAn")
        defer { dispose() }
        let seen = await guarded { Self.nest(levels[...]) }
        #expect(seen == [Bool](repeating: true, count: pattern.count), "nil: the nesting hung")
    }

    @Test("Where re-entered work runs: on the thread that runs the context only for a thread-affine context that another, serving thread runs")
    func reentryPlace() {
        // (thread-affine, the caller runs the context itself, the thread that runs it serves) → where
        let table: [(Bool, Bool, Bool, ReentryPlace)] = [
            (false, false, false, .inline), (false, false, true, .inline),
            (false, true, false, .inline), (false, true, true, .inline),
            (true, true, false, .inline), (true, true, true, .inline),
            // Nobody serves: waiting could never end, so the work runs where it is asked for.
            (true, false, false, .inline),
            (true, false, true, .owner),
        ]
        for (isThreadAffine, ownerIsCaller, ownerServes, expected) in table {
            let place = ReentryPlace(isThreadAffine: isThreadAffine, ownerIsCaller: ownerIsCaller, ownerServes: ownerServes)
            #expect(place == expected, "affine \(isThreadAffine), caller \(ownerIsCaller), serves \(ownerServes)")
        }
    }

    @Test("A → B → A: the innermost work passes preconditionIsCurrent on A and sees A's thread, not B's")
    func innermostWorkRunsOnTheOuterThread() async throws {
        let a = DedicatedThread(name: KernelThreads.uniqueName("RAa"))
        let b = DedicatedThread(name: KernelThreads.uniqueName("RAb"))
        defer {
            a.dispose()
            b.dispose()
        }
        let seen = await guarded { () -> (String, String, Bool)? in
            let outer = a.sync { KernelThreads.currentName() }
            let inner = a.sync {
                b.sync {
                    a.sync { () -> (String, Bool) in
                        (KernelThreads.currentName(), b.isCurrent)
                    }
                }
            }
            return (outer, inner.0, inner.1)
        }
        let names = try #require(seen ?? nil, "the nesting hung")
        #expect(names.0 == a.name)
        #expect(names.1 == a.name)
        #expect(!names.2)
    }

    @Test("A nested level served by A's thread holds what its caller held: a sync back onto B from it runs on B")
    func servedWorkHoldsItsCallersContexts() async throws {
        let a = DedicatedThread(name: KernelThreads.uniqueName("RAh"))
        let b = DedicatedThread(name: KernelThreads.uniqueName("RAh"))
        defer {
            a.dispose()
            b.dispose()
        }
        let queue = MarkedQueue("RAh.Q")
        let seen = await guarded {
            a.sync {
                b.sync {
                    a.sync {
                        try! DispatchMethod.sync(on: .serialQueue(queue.queue)).execute {
                            b.sync { [a.isCurrent, b.isCurrent, queue.isInside] }
                        }.wait()
                    }
                }
            }
        }
        #expect(seen == [false, true, false], "nil: the nesting hung")
    }

    @Test("Exclusion holds: no other work of A or of Q runs while their nested levels run", arguments: ["ABA", "QAQ", "AQA"])
    func exclusionHoldsWhileNestedLevelsRun(pattern: String) async throws {
        let (levels, dispose) = Self.levels(pattern, prefix: "RAx")
        defer { dispose() }
        let outer = levels[0]
        let inside = Counter()
        let overlaps = Counter()
        /// Work for the outer context: it must never find another of its works inside.
        @Sendable func exclusive(_ body: () -> Void = {}) {
            if inside.increment() != 1 { overlaps.increment() }
            body()
            inside.increment(by: -1)
        }
        let producerDone = Latch()
        Thread {
            for _ in 0..<2_000 {
                switch outer {
                case .thread(let thread): try? thread.execute { exclusive() }
                case .queue(let queue): DispatchMethod.async(on: .serialQueue(queue.queue)).execute { exclusive() }
                case .pool: preconditionFailure("a pool of two is not exclusive")
                }
            }
            producerDone.countDown()
        }.start()
        let rounds = await guarded { () -> Int in
            var rounds = 0
            for _ in 0..<100 {
                // The outer level's work steps out of `inside` while it waits for the inner levels, and
                // the re-entered level steps back in: only one of them is ever inside.
                _ = outer.enter {
                    exclusive {}
                    return levels[1].enter {
                        levels[2].enter {
                            exclusive()
                            return true
                        }
                    }
                }
                rounds += 1
            }
            return rounds
        }
        #expect(rounds == 100, "nil: the nesting hung")
        #expect(producerDone.wait(timeout: .seconds(10)))
        // Everything the producer queued has run once the outer context runs a last item.
        _ = await guarded { outer.enter { true } }
        #expect(inside.value == 0)
        #expect(overlaps.value == 0)
    }

    @Test(
        "A chain step queued on a thread-affine context and waited for through another (A → B → wait) runs on its own context",
        arguments: ["AB", "AR", "QB", "QR"], [false, true])
    func chainStepWaitedForThroughAnotherContextRunsOnItsOwn(pattern: String, delayed: Bool) async throws {
        let (levels, dispose) = Self.levels(pattern, prefix: "RAw")
        defer { dispose() }
        let (outer, middle) = (levels[0], levels[1])
        let target: DispatchTarget =
            switch outer {
            case .thread(let thread): .thread(thread)
            case .queue(let queue): .serialQueue(queue.queue)
            case .pool: preconditionFailure("a pool of two is not thread-affine")
            }
        let method: DispatchMethod = delayed ? .after(.milliseconds(20), on: target) : .async(on: target)
        let seen = await guarded { () -> [Bool] in
            outer.enter {
                // Queued behind the work running now: only the outer context's own thread, blocked
                // below in its wait for the middle level, can run it before that work ends.
                let step = method.execute { outer.isCurrent }
                return middle.enter { [(try? step.wait()) ?? false, middle.isCurrent] }
            }
        }
        #expect(seen == [true, true], "nil: the nesting hung")
    }

    @Test("Contexts without thread affinity still run nested work inline: a one-thread pool reached again from A runs on A")
    func poolOfOneRunsNestedWorkInline() async throws {
        try await withPoolAndThread(pool: "RAp", thread: "RAp") { pool, a in
            let method = DispatchMethod.sync(on: .pool(pool))
            let seen = await guarded { () -> [Bool]? in
                try? method.execute {
                    a.sync {
                        try! method.execute { [pool.isCurrentThreadMember, a.isCurrent] }.wait()
                    }
                }.wait()
            }
            #expect((seen ?? nil) == [false, true], "nil: the nesting hung")
        }
    }

    @Test("A ThrottledQueue reached again through A runs the nested work inline, on A's thread")
    func throttledQueueRunsNestedWorkInline() async throws {
        let queue = ThrottledQueue(label: "RAt", interval: .zero)
        let a = DedicatedThread(name: KernelThreads.uniqueName("RAt"))
        defer { a.dispose() }
        let seen = await guarded {
            queue.sync { a.sync { queue.sync { a.isCurrent } } }
        }
        #expect(seen == true, "nil: the nesting hung")
    }
}

/// Re-entered work that must run on its own thread, where running it elsewhere would stop the
/// process: `ProcessExitTests` runs each in a process of its own.
extension ChildScenario {
    static func actorAssumeIsolatedInNestedLevel() {
        let a = DedicatedThread(name: "A")
        let b = DedicatedThread(name: "B")
        let store = PinnedCounter(thread: a)
        let three = a.sync { b.sync { a.sync { store.assumeIsolated { $0.increment() } } } }
        let five = a.sync {
            b.sync { a.sync { b.sync { a.sync { store.assumeIsolated { $0.increment() } } } } }
        }
        a.sync { a.preconditionIsCurrent() }
        b.sync { a.sync { b.sync { b.preconditionIsCurrent() } } }
        precondition(three == 1 && five == 2, "counted \(three), \(five)")
    }

    static func actorAssumeIsolatedInChainStepWaitedForThroughB() {
        let a = DedicatedThread(name: "A")
        let b = DedicatedThread(name: "B")
        let store = PinnedCounter(thread: a)
        let counted = a.sync {
            let step = DispatchMethod.async(on: .thread(a)).execute { store.assumeIsolated { $0.increment() } }
            let next = step.then(.async(on: .thread(a))) { _ in store.assumeIsolated { $0.increment() } }
            return b.sync { try! next.wait() }
        }
        precondition(counted == 2, "counted \(counted)")
    }
}
