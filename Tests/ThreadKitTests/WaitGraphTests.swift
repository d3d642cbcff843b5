import Testing
@testable import ThreadKit

/// Cycle finding over made-up graphs of blocked threads: no threads, no clock.
@Suite struct WaitGraphTests {
    typealias Graph = WaitGraph<String, [String]>
    typealias Hop = Graph.Hop

    /// Threads already blocked (each holding one context), and what T1 holds as it waits for B.
    struct Scenario: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let blocked: [Hop]
        let t1Holds: [String]
        /// The cycle T1's wait closes, starting at T1; `nil` if it closes none.
        let cycle: [Hop]?
    }

    static let scenarios: [Scenario] = [
        Scenario(testDescription: "A thread that holds nothing never closes a cycle",
                 blocked: [Hop(thread: "T2", holds: "B", waitsFor: "A")], t1Holds: [], cycle: nil),
        Scenario(testDescription: "Two threads: T1 holds A and waits for B while T2 holds B and waits for A",
                 blocked: [Hop(thread: "T2", holds: "B", waitsFor: "A")], t1Holds: ["A"],
                 cycle: [Hop(thread: "T1", holds: "A", waitsFor: "B"), Hop(thread: "T2", holds: "B", waitsFor: "A")]),
        Scenario(testDescription: "Three threads: A → B → C → A",
                 blocked: [Hop(thread: "T2", holds: "B", waitsFor: "C"), Hop(thread: "T3", holds: "C", waitsFor: "A")],
                 t1Holds: ["A"],
                 cycle: [Hop(thread: "T1", holds: "A", waitsFor: "B"), Hop(thread: "T2", holds: "B", waitsFor: "C"),
                         Hop(thread: "T3", holds: "C", waitsFor: "A")]),
        // Nobody blocked holds B: T1 waits for a thread that still runs.
        Scenario(testDescription: "A holder that is not blocked makes progress: no cycle",
                 blocked: [Hop(thread: "T3", holds: "C", waitsFor: "A")], t1Holds: ["A"], cycle: nil),
        Scenario(testDescription: "A chain that ends elsewhere is no cycle",
                 blocked: [Hop(thread: "T2", holds: "B", waitsFor: "C"), Hop(thread: "T3", holds: "C", waitsFor: "D")],
                 t1Holds: ["A"], cycle: nil),
    ]

    @Test("T1's wait for B closes exactly the cycle the blocked threads make, or none", arguments: scenarios)
    func cycleOfAWait(_ scenario: Scenario) {
        var graph = Graph()
        for hop in scenario.blocked { graph.block(hop.thread, holding: [hop.holds], waitingFor: hop.waitsFor) }
        #expect(graph.cycle(if: "T1", holding: scenario.t1Holds, waitsFor: "B") == scenario.cycle)
    }

    @Test("Unblocking removes a thread from every cycle")
    func unblock() {
        var graph = Graph()
        graph.block("T2", holding: ["B"], waitingFor: "A")
        graph.unblock("T2")
        #expect(graph.cycle(if: "T1", holding: ["A"], waitsFor: "B") == nil)
        #expect(graph.blocked.isEmpty)
        // Blocking again replaces the earlier wait.
        graph.block("T2", holding: ["B"], waitingFor: "C")
        graph.block("T2", holding: ["B"], waitingFor: "A")
        #expect(graph.blocked.count == 1)
        #expect(graph.cycle(if: "T1", holding: ["A"], waitsFor: "B")?.count == 2)
    }

    @Test("Held contexts passed on: a thread running work for a blocked waiter holds the waiter's contexts too")
    func inheritedContexts() {
        var graph = Graph()
        // T1 holds A and waits for B; T2 runs B's work for T1, so it holds A and B, and waits for C.
        graph.block("T1", holding: ["A"], waitingFor: "B")
        graph.block("T2", holding: ["A", "B"], waitingFor: "C")
        // T3 holds C and now waits for A: held by T1 (and T2), which wait, in the end, for C.
        let cycle = graph.cycle(if: "T3", holding: ["C"], waitsFor: "A")
        #expect(cycle?.first == Hop(thread: "T3", holds: "C", waitsFor: "A"))
        #expect(cycle?.last?.waitsFor == "C")
        // T4 holds D and waits for A: the holders wait for C, which nobody blocked holds.
        #expect(graph.cycle(if: "T4", holding: ["D"], waitsFor: "A") == nil)
    }

    @Test("A blocked thread whose wait is over (its work ran; it has yet to unblock) takes no part in a cycle")
    func waitThatIsOverIsNoHop() {
        var graph = WaitGraph<String, [String]>()
        graph.block("T2", holding: ["B"], waitingFor: "A", isOver: { true })
        #expect(graph.cycle(if: "T1", holding: ["A"], waitsFor: "B") == nil)
        graph.block("T2", holding: ["B"], waitingFor: "A", isOver: { false })
        #expect(graph.cycle(if: "T1", holding: ["A"], waitsFor: "B")?.count == 2)
        graph.block("T2", holding: ["B"], waitingFor: "A")
        #expect(graph.cycle(if: "T1", holding: ["A"], waitsFor: "B")?.count == 2)
    }

    @Test("A thread blocked again while serving a request in its wait replaces its entry, and gets the outer one back")
    func nestedBlockReplacesAndRestores() {
        var graph = WaitGraph<String, [String]>()
        #expect(graph.block("T1", holding: ["A"], waitingFor: "B") == nil)
        // T1 serves a request for A, holding what the requester held, and blocks for C.
        let outer = graph.block("T1", holding: ["A", "B"], waitingFor: "C")
        #expect(outer?.holds == ["A"])
        #expect(outer?.waitsFor == "B")
        #expect(graph.blocked.count == 1)
        #expect(graph.cycle(if: "T2", holding: ["C"], waitsFor: "B")?.count == 2)
        // The inner wait ends: the outer entry comes back.
        let inner = graph.block("T1", holding: outer!.holds, waitingFor: outer!.waitsFor)
        #expect(inner?.waitsFor == "C")
        #expect(graph.cycle(if: "T2", holding: ["B"], waitsFor: "A")?.count == 2)
        #expect(graph.cycle(if: "T2", holding: ["C"], waitsFor: "B") == nil)
        #expect(graph.unblock("T1")?.waitsFor == "B")
        #expect(graph.unblock("T1") == nil)
        #expect(graph.blocked.isEmpty)
    }

    @Test("The message names each thread, what it holds and what it waits for")
    func message() {
        let threads = (Marker(), Marker())
        let first = ExecutionContexts.ThreadKey(id: ObjectIdentifier(threads.0), name: "T1")
        let second = ExecutionContexts.ThreadKey(id: ObjectIdentifier(threads.1), name: "T2")
        let thread = DedicatedThread(name: "db")
        defer { thread.dispose() }
        let db = SerialContext(.thread(thread.core))
        let api = SerialContext(.throttled(ThrottledQueue(label: "api")))
        let text = ExecutionContexts.message(
            for: [.init(thread: first, holds: db, waitsFor: api), .init(thread: second, holds: api, waitsFor: db)])
        #expect(text == #"deadlock: thread "T1" holds DedicatedThread "db" and waits for ThrottledQueue "api", held by thread "T2", which waits for "db""#)
    }

    /// Stands for a thread's record: only its identity matters.
    final class Marker: Sendable {}
}
