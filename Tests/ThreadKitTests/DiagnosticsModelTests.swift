import Foundation
import Testing
import ThreadKitTestSupport
@testable import ThreadKit

/// The pure parts of the diagnostics: cycles of a wait-for graph, the snapshot's JSON, its text,
/// and the Prometheus rendering, on snapshots built by hand.
@Suite struct DiagnosticsModelTests {
    // MARK: - Cycles

    @Test func chainsThatEndAtARunningThreadHaveNoCycle() {
        #expect(WaitCycles.find([1: 2, 2: 3, 4: 3]).isEmpty)
        #expect(WaitCycles.find([Int: Int]()).isEmpty)
    }

    @Test func aCycleIsFoundOnceStartingWithItsSmallestThread() {
        #expect(WaitCycles.find([5: 3, 3: 9, 9: 5]) == [[3, 9, 5]])
        #expect(WaitCycles.find([2: 1, 1: 2]) == [[1, 2]])
        #expect(WaitCycles.find([7: 7]) == [[7]])
    }

    @Test func chainsLeadingIntoACycleAreNotPartOfIt() {
        // 1 → 2 → 3 → 4 → 2, and 8 → 3: one cycle, 2 3 4.
        #expect(WaitCycles.find([1: 2, 2: 3, 3: 4, 4: 2, 8: 3]) == [[2, 3, 4]])
    }

    @Test func separateCyclesAreEachReportedInOrder() {
        #expect(WaitCycles.find([10: 11, 11: 10, 4: 6, 6: 5, 5: 4, 1: 4]) == [[4, 6, 5], [10, 11]])
    }

    @Test func cyclesOfWaitsIgnoreWaitsWithoutAHolder() {
        let waits = [
            Self.wait(1, holder: 2), Self.wait(2, holder: 1), Self.wait(3, holder: nil), Self.wait(4, holder: 3),
        ]
        let cycles = Diagnostics.cycles(of: waits)
        #expect(cycles.map { $0.map(\.thread.kernelThreadID) } == [[1, 2]])
        #expect(cycles[0][0] == waits[0])
    }

    @Test func aCycleIsReportedOnlyIfEveryWaitInItIsStillInForce() {
        // Two cycles, 1 ⇄ 2 and 3 ⇄ 4; thread 4's wait ended between the reads.
        let waits = [Self.wait(1, holder: 2), Self.wait(2, holder: 1), Self.wait(3, holder: 4), Self.wait(4, holder: 3)]
        let cycles = Diagnostics.cycles(of: waits) { $0.thread.kernelThreadID != 4 }
        #expect(cycles.map { $0.map(\.thread.kernelThreadID) } == [[1, 2]])
    }

    @Test func secondsReachDeadlinesOfNeverWithoutWrapping() {
        let clock = DiagnosticsClock(now: MonotonicInstant(nanoseconds: 5_000_000_000))
        #expect(clock.seconds(since: MonotonicInstant(nanoseconds: 2_000_000_000)) == 3)
        #expect(clock.seconds(until: MonotonicInstant(nanoseconds: 7_500_000_000)) == 2.5)
        let never = clock.seconds(until: .distantFuture)
        #expect(never > 9e9 && never < 9.3e9)
        #expect(clock.seconds(since: .distantFuture) == -never)
    }

    // MARK: - JSON and text

    @Test func jsonReadsBackToTheSameSnapshot() throws {
        let snapshot = Self.sample()
        let decoded = try JSONDecoder().decode(Snapshot.self, from: Data(snapshot.json().utf8))
        #expect(decoded == snapshot)
        #expect(decoded.components[0].metrics[2].buckets.last?.upperBound == .infinity)
        // Compact and pretty forms hold the same content.
        let compact = try JSONDecoder().decode(Snapshot.self, from: Data(snapshot.json(prettyPrinted: false).utf8))
        #expect(compact == snapshot)
        #expect(!snapshot.json(prettyPrinted: false).contains("\n"))
        #expect(snapshot.json().contains("\"upperBound\" : \"+Inf\""))
    }

    @Test func textPutsDeadlocksAndLongWaitsFirstThenAlignedComponents() {
        let text = Self.sample().description
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines[0] == "ThreadKit dump 2001-01-01T00:16:40.000Z, process 4242")
        #expect(lines[2] == "Found one ThreadKit-level deadlock:")
        #expect(lines[4] == "  \"io Thread1\" (tid 101) waits 2.500s in wait for a task of ThreadPool \"io\", held by \"io Thread2\" (tid 102)")
        #expect(lines[5] == "  \"io Thread2\" (tid 102) waits 2.000s in wait for a task of ThreadPool \"io\", held by \"io Thread1\" (tid 101)")
        #expect(lines[7] == "Long waits (over 1.000s):")
        #expect(lines[8].hasPrefix("  \"io Thread1\" (tid 101) waits 2.500s"))
        #expect(lines[9].hasPrefix("  \"io Thread2\" (tid 102) waits 2.000s"))
        #expect(lines[11] == "ThreadPool \"io\": size=2 keepAlive=10s")
        #expect(lines[12] == "  threads=2 tasks_completed_total=17")
        #expect(lines[13] == "  pending 3; next: \"refresh\" in 250.0ms")
        // Thread rows: columns aligned on the longest cell.
        #expect(lines[14] == "  \"io Thread1\"  [io Thread1]  tid 101  blocked   2.500s  fetch, waiting for a task of ThreadPool \"io\"")
        #expect(lines[15] == "  \"io Thread2\"  [io Thread2]  tid 102  blocked   2.000s  waiting for a task of ThreadPool \"io\"")
        #expect(lines[16] == "  \"io Thread3\"  [io Thread3]  tid 103  sleeping    40µs  until 1.500s from now")
        #expect(text.hasSuffix("\n"))
    }

    @Test func shortTimesAreShownInTheirUnit() {
        #expect(Snapshot.seconds(2.5) == "2.500s")
        #expect(Snapshot.seconds(0.0125) == "12.5ms")
        #expect(Snapshot.seconds(0.00004) == "40µs")
        #expect(Snapshot.seconds(-0.002) == "-2.0ms")
        #expect(Snapshot.seconds(0) == "0.000s")
    }

    // MARK: - Prometheus

    @Test func prometheusTextParsesStrictlyAndNamesFamiliesByPart() throws {
        let text = PrometheusText.render(Self.sample())
        let families = try PrometheusParser.parse(text)
        #expect(PrometheusParser.value(families, "threadkit_pool_tasks_completed_total", ["pool": "io"]) == 17)
        #expect(PrometheusParser.value(families, "threadkit_pool_threads", ["pool": "io"]) == 2)
        #expect(PrometheusParser.value(families, "threadkit_pool_lateness_seconds_count", ["pool": "io"]) == 5)
        #expect(PrometheusParser.value(families, "threadkit_pool_lateness_seconds_bucket", ["pool": "io", "le": "0.001"]) == 3)
        #expect(PrometheusParser.value(families, "threadkit_pool_lateness_seconds_sum", ["pool": "io"]) == 0.0031)
        #expect(PrometheusParser.value(families, "threadkit_threads", ["state": "blocked"]) == 2)
        #expect(PrometheusParser.value(families, "threadkit_threads", ["state": "sleeping"]) == 1)
        #expect(PrometheusParser.value(families, "threadkit_deadlocks") == 1)
        #expect(PrometheusParser.value(families, "threadkit_waits_blocked") == 2)
        #expect(families.first { $0.name == "threadkit_pool_tasks_completed_total" }?.type == "counter")
        #expect(families.first { $0.name == "threadkit_pool_lateness_seconds" }?.type == "histogram")
        #expect(text.contains("# HELP threadkit_pool_tasks_completed_total Tasks run to completion.\n"))
    }

    @Test func prometheusFamiliesOfSeveralComponentsStayTogetherAndNamesAreEscaped() throws {
        var snapshot = Self.sample()
        var second = snapshot.components[0]
        second.name = "we\"ird\\name\nhere"
        var third = snapshot.components[0]
        third.name = "io"
        let queue = Snapshot.Component(
            kind: "ThrottledQueue", name: "api",
            metrics: [Snapshot.Metric("tasks_pending", .gauge, 4, help: "Tasks waiting.\nSecond line \\ here")])
        snapshot.components = [snapshot.components[0], queue, second, third]
        let text = PrometheusText.render(snapshot)
        let families = try PrometheusParser.parse(text)
        #expect(PrometheusParser.value(families, "threadkit_pool_threads", ["pool": "we\"ird\\name\nhere"]) == 2)
        // Two pools called "io": the second's series are told apart.
        #expect(PrometheusParser.value(families, "threadkit_pool_threads", ["pool": "io #2"]) == 2)
        #expect(PrometheusParser.value(families, "threadkit_queue_tasks_pending", ["queue": "api"]) == 4)
        #expect(families.first { $0.name == "threadkit_queue_tasks_pending" }?.help == "Tasks waiting.\nSecond line \\ here")
        #expect(families.first { $0.name == "threadkit_pool_threads" }?.samples.count == 3)
    }

    @Test func theParserRejectsWhatTheFormatForbids() {
        let bad = [
            "x_total 1",  // no trailing line feed
            "# TYPE a_total counter\na_total 1\n# TYPE b gauge\nb 1\na_total{x=\"1\"} 2\n",  // family split
            "# TYPE c counter\nc 1\n",  // counter without _total
            "m{l=\"v\"} 1\nm{l=\"v\"} 2\n",  // series twice
            "m{l=v} 1\n",  // unquoted
            "m{l=\"\\q\"} 1\n",  // bad escape
            "m 1.0.0\n",  // bad value
            "m inf\n",  // Go spells it +Inf
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",  // falling counts
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n",  // no +Inf
            "# TYPE g gauge\n# TYPE g gauge\ng 1\n",  // TYPE twice
            "9m 1\n",  // bad name
        ]
        for text in bad {
            #expect(throws: PrometheusFormatError.self, "accepted: \(text)") { try PrometheusParser.parse(text) }
        }
        #expect(throws: Never.self) { try PrometheusParser.parse("# HELP m a \\\\ b\n# TYPE m gauge\nm{a=\"x\",b=\"\\\"\"} -1.5e-3 1700000000000\n") }
    }

    @Test func numbersAreWrittenAsTheFormatSpellsThem() {
        #expect(PrometheusText.number(3) == "3")
        #expect(PrometheusText.number(0.25) == "0.25")
        #expect(PrometheusText.number(.infinity) == "+Inf")
        #expect(PrometheusText.number(-.infinity) == "-Inf")
        #expect(PrometheusText.number(.nan) == "NaN")
        #expect(PrometheusText.metricName("tasks-done.total") == "tasks_done_total")
        #expect(PrometheusText.metricName("9lives") == "_lives")
    }

    // MARK: - Samples

    static func wait(_ thread: Int32, holder: Int32?, seconds: Double = 1) -> Snapshot.Wait {
        Snapshot.Wait(
            thread: .init(name: "t\(thread)", kernelThreadID: thread), kind: "wait", waitsFor: "x",
            holder: holder.map { .init(name: "t\($0)", kernelThreadID: $0) }, seconds: seconds)
    }

    /// A two-thread pool deadlocked on each other's tasks, with a third thread asleep.
    static func sample() -> Snapshot {
        let one = Snapshot.ThreadReference(name: "io Thread1", kernelThreadID: 101)
        let two = Snapshot.ThreadReference(name: "io Thread2", kernelThreadID: 102)
        let waits = [
            Snapshot.Wait(thread: one, kind: "wait", waitsFor: "a task of ThreadPool \"io\"", holder: two, seconds: 2.5),
            Snapshot.Wait(thread: two, kind: "wait", waitsFor: "a task of ThreadPool \"io\"", holder: one, seconds: 2),
        ]
        let pool = Snapshot.Component(
            kind: "ThreadPool", name: "io",
            configuration: [.init("size", "2"), .init("keepAlive", "10s")],
            metrics: [
                Snapshot.Metric("threads", .gauge, 2, help: "Threads alive."),
                Snapshot.Metric("tasks_completed_total", .counter, 17, help: "Tasks run to completion."),
                Snapshot.Metric(
                    histogram: "lateness_seconds", sum: 0.0031,
                    buckets: [.init(upperBound: 0.001, count: 3), .init(upperBound: 0.01, count: 5), .init(upperBound: .infinity, count: 5)],
                    help: "How late."),
            ],
            threads: [
                .init(name: "io Thread1", kernelName: "io Thread1", kernelThreadID: 101, state: .blocked, seconds: 2.5,
                      work: "fetch", waitsFor: "a task of ThreadPool \"io\""),
                .init(name: "io Thread2", kernelName: "io Thread2", kernelThreadID: 102, state: .blocked, seconds: 2,
                      waitsFor: "a task of ThreadPool \"io\""),
                .init(name: "io Thread3", kernelName: "io Thread3", kernelThreadID: 103, state: .sleeping, seconds: 0.00004, until: 1.5),
            ],
            pending: [.init(what: "\"refresh\"", dueIn: 0.25, reason: "due")], pendingCount: 3)
        return Snapshot(
            takenAt: Date(timeIntervalSinceReferenceDate: 1000), processID: 4242, longWaitThreshold: 1,
            components: [pool], otherThreads: [], waits: waits, cycles: Diagnostics.cycles(of: waits))
    }
}
