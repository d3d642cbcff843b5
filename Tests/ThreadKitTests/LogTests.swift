import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// A source name no other test uses, so parallel tests never see each other's switches or records.
private func uniqueSource(_ label: String) -> Log.Source {
    Log.Source("LogTests.\(label).\(UUID().uuidString)")
}

/// Log sources and their switches. Nothing here changes process-wide state other than the switch of
/// a source with a unique name; `enableAll` and `disableAll` are tested in child processes.
@Suite struct LogSourceTests {
    @Test("ThreadKit's own sources carry their documented names")
    func predefinedNames() {
        #expect(Log.Source.threadPool.name == "ThreadPool")
        #expect(Log.Source.timer.name == "TimerThread")
        #expect(Log.Source.throttle.name == "ThrottledQueue")
        #expect(Log.Source.urlDispatcher.name == "URLDispatcher")
        #expect(Log.Source.timer == Log.Source("TimerThread"))
        #expect(Log.Source.timer.description == "TimerThread")
        let all: Set<Log.Source> = [.threadPool, .timer, .throttle, .urlDispatcher]
        #expect(all.count == 4)
    }

    @Test("every source is off until enabled")
    func offByDefault() {
        for label in ["a", "b", "c", "d"] {
            #expect(!Log.isEnabled(uniqueSource(label)))
        }
    }

    @Test("enable, disable and isEnabled; two sources with the same name share one switch")
    func enableAndDisable() {
        let name = "LogTests.switch.\(UUID().uuidString)"
        let source = Log.Source(name)
        let twin = Log.Source(name)
        let other = uniqueSource("other")
        #expect(source == twin)
        #expect(source.hashValue == twin.hashValue)
        #expect(Set([source, twin]).count == 1)
        #expect(source != other)
        #expect(source.name == name)
        #expect(source.description == name)

        Log.enable(source)
        #expect(Log.isEnabled(source))
        #expect(Log.isEnabled(twin))
        #expect(Log.isEnabled(Log.Source(name)))  // also a source made after the switch changed
        #expect(!Log.isEnabled(other))
        Log.disable(twin)
        #expect(!Log.isEnabled(source))
        #expect(!Log.isEnabled(Log.Source(name)))
        Log.enable(source)
        Log.enable(twin)
        #expect(Log.isEnabled(source))
        Log.disable(source)
        Log.disable(source)
        #expect(!Log.isEnabled(twin))
    }

    @Test("switching sources from many threads at once is safe and ends as the last switch says")
    func switchingIsThreadSafe() async {
        let sources = (0..<4).map { uniqueSource("race\($0)") }
        let done = Counter()
        for thread in 0..<8 {
            startThread(named: "LogSwitch\(thread)") {
                for round in 0..<2_000 {
                    let source = Log.Source(sources[(thread + round) % sources.count].name)
                    if (round + thread).isMultiple(of: 2) { Log.enable(source) } else { Log.disable(source) }
                    _ = Log.isEnabled(source)
                }
                done.increment()
            }
        }
        #expect(await eventually(timeout: .seconds(20)) { done.value == 8 })
        for source in sources {
            Log.enable(source)
            #expect(Log.isEnabled(source))
            Log.disable(source)
            #expect(!Log.isEnabled(source))
        }
    }

    @Test("the console line is `<thread name> <source name>: <message>`")
    func consoleLineFormat() {
        let record = Log.Record(
            source: Log.Source("Billing"), message: "charged 3 EUR", threadName: "Pool Thread2",
            date: Date(), file: "ThreadKitTests/LogTests.swift", line: 12)
        #expect(ConsoleLog.line(for: record) == "Pool Thread2 Billing: charged 3 EUR\n")
        let empty = Log.Record(source: .timer, message: "", threadName: "main", date: Date(), file: "", line: 0)
        #expect(ConsoleLog.line(for: empty) == "main TimerThread: \n")
    }

    @Test("with no delegate, an enabled source writes its console line to standard error")
    func consoleWritesToStandardError() async throws {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            let source = Log.Source("LogConsoleChild")
            Log.log(source, "not shown: the source is off")
            Log.enable(source)
            let done = DispatchSemaphore(value: 0)
            let thread = Thread {
                NamedThread.nameCurrentThread("LogConsoleThrd")
                Log.log(source, "hello from a named thread")
                done.signal()
            }
            thread.start()
            done.wait()
        }
        let output = String(decoding: try #require(result).standardErrorContent, as: UTF8.self)
        #expect(output.contains("LogConsoleThrd LogConsoleChild: hello from a named thread\n"))
        #expect(!output.contains("not shown"))
    }

    @Test("enableAll turns on every source, also sources created later; disableAll turns all off")
    func enableAllAndDisableAll() async {
        // In a child process: the switches are process-wide, and tests run in parallel.
        await #expect(processExitsWith: .success) {
            let before = Log.Source("LogAllBefore")
            precondition(!Log.isEnabled(before) && !Log.isEnabled(.timer))
            Log.enableAll()
            precondition(Log.isEnabled(before), "an existing source")
            precondition(Log.isEnabled(.threadPool) && Log.isEnabled(.timer), "the predefined sources")
            precondition(Log.isEnabled(.throttle) && Log.isEnabled(.urlDispatcher), "the predefined sources")
            precondition(Log.isEnabled(Log.Source("LogAllLater")), "a source created after enableAll")
            Log.disable(before)
            precondition(!Log.isEnabled(before) && Log.isEnabled(.timer), "one source can still be turned off")
            Log.disableAll()
            precondition(!Log.isEnabled(.timer) && !Log.isEnabled(Log.Source("LogAllLater")))
            precondition(!Log.isEnabled(Log.Source("LogAllAfter")), "a source created after disableAll")
            Log.enable(before)
            precondition(Log.isEnabled(before) && !Log.isEnabled(.threadPool), "one source can still be turned on")
        }
    }
}

/// Records the delegate receives for one source, and whether it was ever entered concurrently.
final class LogRecordingDelegate: LogDelegate {
    let source: Log.Source
    private let inside = Atomic<Int>(0)
    private let overlapCount = Atomic<Int>(0)
    private let received = Recorder<Log.Record>()
    private let onRecord: (@Sendable (Log.Record) -> Void)?

    init(source: Log.Source, onRecord: (@Sendable (Log.Record) -> Void)? = nil) {
        self.source = source
        self.onRecord = onRecord
    }

    func log(_ record: Log.Record) {
        if inside.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
            overlapCount.add(1, ordering: .relaxed)
        }
        if record.source == source {
            received.append(record)
            onRecord?(record)
            // Stay a moment, so that a second caller would overlap.
            for _ in 0..<50 { sched_yield() }
        }
        inside.subtract(1, ordering: .sequentiallyConsistent)
    }

    var records: [Log.Record] { received.values }
    var overlaps: Int { overlapCount.load(ordering: .relaxed) }
}

/// The delegate is process-wide: these tests run one at a time and put it back to `nil`. Each counts
/// only records of its own uniquely named source.
@Suite(.serialized) struct LogDelegateTests {
    /// Runs `body` with a ``LogRecordingDelegate`` installed for a new, uniquely named source, enabled
    /// unless `enabled` is false; afterwards the source is off and there is no delegate.
    static func withRecordingDelegate(
        _ label: String, enabled: Bool = true, onRecord: (@Sendable (Log.Record) -> Void)? = nil,
        _ body: (_ source: Log.Source, _ delegate: LogRecordingDelegate) async throws -> Void
    ) async rethrows {
        let source = uniqueSource(label)
        let delegate = LogRecordingDelegate(source: source, onRecord: onRecord)
        Log.delegate = delegate
        defer { Log.delegate = nil }
        if enabled { Log.enable(source) }
        defer { Log.disable(source) }
        try await body(source, delegate)
    }

    @Test("a disabled call never evaluates its message")
    func disabledCallNeverEvaluatesMessage() async {
        await Self.withRecordingDelegate("lazy", enabled: false) { source, delegate in
            let evaluations = Counter()
            @Sendable func message() -> String {
                evaluations.increment()
                return "evaluated"
            }
            for _ in 0..<1_000 { Log.log(source, message()) }
            #expect(evaluations.value == 0)
            #expect(delegate.records.isEmpty)

            Log.enable(source)
            Log.log(source, message())
            #expect(evaluations.value == 1)
            // A log call can return before its record is delivered, when another thread is delivering.
            #expect(await eventually(timeout: .seconds(5)) { delegate.records.count == 1 })
            #expect(delegate.records.map(\.message) == ["evaluated"])

            Log.disable(source)
            Log.log(source, message())
            #expect(evaluations.value == 1)
            #expect(delegate.records.count == 1)
        }
    }

    @Test("the delegate receives the record: source, message, thread name, file, line, date")
    func delegateReceivesRecord() async throws {
        try await Self.withRecordingDelegate("record") { source, delegate in
            #expect(Log.delegate === delegate)
            let threadName = "LogRecordThread"
            let seenName = LockedValue<String?>(nil)
            let expectedLine = LockedValue<Int>(0)
            let before = Date()
            startThread(named: threadName) {
                seenName.value = Thread.current.name
                expectedLine.value = #line + 1
                Log.log(source, "hello \(42)")
            }
            #expect(await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(1)) { delegate.records.count == 1 })
            let after = Date()
            let record = try #require(delegate.records.first)
            #expect(record.source == source)
            #expect(record.source.name == source.name)
            #expect(record.message == "hello 42")
            #expect(seenName.value == threadName)
            #expect(record.threadName == seenName.value)
            #expect(record.file == #fileID)
            #expect(record.line == expectedLine.value)
            #expect(record.date >= before && record.date <= after)

            // Explicit file and line pass through.
            Log.log(source, "explicit", file: "Somewhere/Else.swift", line: 7)
            let explicitThreadName = ThreadKit.NamedThread.currentName()
            #expect(await eventually(timeout: .seconds(5)) { delegate.records.count == 2 })
            let explicit = try #require(delegate.records.last)
            #expect(explicit.message == "explicit")
            #expect(explicit.file == "Somewhere/Else.swift")
            #expect(explicit.line == 7)
            #expect(explicit.threadName == explicitThreadName)
            #expect(delegate.overlaps == 0)

            Log.delegate = nil
            #expect(Log.delegate == nil)
        }
    }

    @Test("records from 8 threads reach the delegate one at a time, each thread's in order, none lost")
    func recordsFromManyThreadsNeverInterleave() async throws {
        try await Self.withRecordingDelegate("threads") { source, delegate in
            let threads = 8
            let perThread = 2_000
            let gate = Latch()
            let done = Counter()
            let prefix = "Log\(UUID().uuidString.prefix(4))-"
            for thread in 0..<threads {
                startThread(named: "\(prefix)\(thread)") {
                    gate.wait(timeout: .seconds(60))
                    for index in 0..<perThread { Log.log(source, "\(thread) \(index)") }
                    done.increment()
                }
            }
            gate.countDown()
            #expect(await eventually(timeout: .seconds(30)) { done.value == threads })
            #expect(await eventually(timeout: .seconds(5)) { delegate.records.count >= threads * perThread })
            let records = delegate.records
            #expect(records.count == threads * perThread)
            #expect(delegate.overlaps == 0)
            var next = [Int](repeating: 0, count: threads)
            var outOfOrder = 0
            var wrongThreadName = 0
            for record in records {
                let parts = record.message.split(separator: " ").compactMap { Int($0) }
                try #require(parts.count == 2)
                let (thread, index) = (parts[0], parts[1])
                if record.threadName != "\(prefix)\(thread)" { wrongThreadName += 1 }
                if index != next[thread] { outOfOrder += 1 }
                next[thread] = index + 1
            }
            #expect(outOfOrder == 0)
            #expect(wrongThreadName == 0)
            #expect(next == [Int](repeating: perThread, count: threads))
        }
    }

    @Test("a delegate that logs from inside log() does not deadlock; its record comes after")
    func delegateMayLogItself() async throws {
        await Self.withRecordingDelegate("reentrant", onRecord: { record in
            if record.message.hasPrefix("outer") { Log.log(record.source, "inner after \(record.message)") }
        }) { source, delegate in
            let returned = Counter()
            startThread(named: "LogReentrant") {
                Log.log(source, "outer 1")
                // Usually already delivered: this thread delivers, unless another thread was delivering.
                let deadline = ContinuousClock.now + .seconds(5)
                while delegate.records.count < 2, ContinuousClock.now < deadline { usleep(100) }
                Log.log(source, "outer 2")
                returned.increment()
            }
            #expect(await eventually(timeout: .seconds(5)) { returned.value == 1 }, "deadlocked")
            #expect(await eventually(timeout: .seconds(5)) { delegate.records.count >= 4 })
            // Each nested record is delivered after the delegate call that logged it has returned.
            #expect(delegate.records.map(\.message) == ["outer 1", "inner after outer 1", "outer 2", "inner after outer 2"])
            #expect(delegate.records.filter { $0.message.hasPrefix("outer") }.allSatisfy { $0.threadName == "LogReentrant" })
            #expect(delegate.overlaps == 0)
        }
    }
}
