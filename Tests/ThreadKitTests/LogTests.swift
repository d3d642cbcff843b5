import Foundation
import Synchronization
import Testing
@testable import ThreadKit
import SeededRandom

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

    @Test("with no delegate, an enabled source writes its console line to standard error", .exitTestOnOwnThreads)
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

    @Test("enableAll turns on every source, also sources created later; disableAll turns all off", .exitTestOnOwnThreads)
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
            // Stay a moment, so that a second caller would overlap: a few microseconds on this
            // core, measured by the clock. Not `sched_yield()`: on a busy machine each yield hands
            // the core to another runnable thread for a whole time slice (about 4 ms here), and
            // 50 of them per record made 16,000 records take minutes to deliver.
            let until = MonotonicInstant.now().advanced(by: Self.stay)
            while MonotonicInstant.now() < until {}
        }
        inside.subtract(1, ordering: .sequentiallyConsistent)
    }

    var records: [Log.Record] { received.values }
    var overlaps: Int { overlapCount.load(ordering: .relaxed) }

    /// How long each call for the delegate's own source lasts.
    private static let stay = Duration.microseconds(5)
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
            // 16,000 in all: below the 32,768 records that may wait, so that none is dropped.
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

    @Test("records queued behind a delivery in progress all reach the delegate, though nobody logs again")
    func queuedRecordsAreDeliveredWithoutFurtherLogging() async throws {
        let release = Latch()
        try await Self.withRecordingDelegate("noStall", onRecord: { record in
            // The first record holds up delivery until every other record is queued.
            if record.message == "first" { release.wait(timeout: .seconds(30)) }
        }) { source, delegate in
            let threads = 4
            let perThread = 500
            let returned = Counter()
            startThread(named: "LogNoStallFirst") {
                Log.log(source, "first")  // delivers it, and waits in the delegate
                returned.increment()
            }
            #expect(await eventually(timeout: .seconds(10)) { delegate.records.count == 1 })
            for thread in 0..<threads {
                startThread(named: "LogNoStall\(thread)") {
                    // Someone is delivering: each call only queues its record and returns.
                    for index in 0..<perThread { Log.log(source, "\(thread) \(index)") }
                    returned.increment()
                }
            }
            #expect(await eventually(timeout: .seconds(30)) { returned.value == threads }, "a log call waited for delivery")
            // Every record is queued and no thread will log again; the first caller delivers its
            // share, hands the rest on, and the delivery thread delivers it all.
            #expect(delegate.records.count == 1)
            release.countDown()
            let delivered = await eventually(timeout: .seconds(10)) { delegate.records.count == 1 + threads * perThread }
            #expect(delivered, "records were left queued: \(delegate.records.count) of \(1 + threads * perThread) delivered")
            // Logging again restarts a stalled delivery: enough of it lets putting the delegate back
            // (which waits for every record queued for it) end, so the test fails instead of hanging.
            var nudges = 0
            while !delivered, nudges < threads * perThread, delegate.records.count < 1 + threads * perThread + nudges {
                Log.log(source, "nudge")
                nudges += 1
            }
            #expect(await eventually(timeout: .seconds(10)) { returned.value == threads + 1 })
            let records = delegate.records
            guard delivered else { return }
            var next = [Int](repeating: 0, count: threads)
            for record in records.dropFirst() {
                let parts = record.message.split(separator: " ").compactMap { Int($0) }
                try #require(parts.count == 2)
                #expect(parts[1] == next[parts[0]])
                next[parts[0]] = parts[1] + 1
            }
            #expect(next == [Int](repeating: perThread, count: threads))
            #expect(delegate.overlaps == 0)
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

// MARK: - 23, 25: the console line and its writer

/// Waits in a child process, without a Swift concurrency thread: `true` once `condition` holds.
private func waitInChild(timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        usleep(1_000)
    }
    return true
}

extension LogSourceTests {
    @Test("A newline in a message cannot forge a console line: control characters are escaped on the console")
    func consoleEscapesControlCharacters() {
        let forged = Log.Record(
            source: Log.Source("Billing"), message: "paid 3 €\nmain Billing: refunded 3000 €",
            threadName: "Pool Thread2", date: Date(), file: "", line: 0)
        #expect(ConsoleLog.line(for: forged) == "Pool Thread2 Billing: paid 3 €\\nmain Billing: refunded 3000 €\n")

        let controls = Log.Record(
            source: Log.Source("Bill\ning"), message: "a\rb\tc\u{0}d\u{1B}[31me\u{7F}f\u{85}g\u{9F}h\u{2028}i\u{2029}j",
            threadName: "T\r1", date: Date(), file: "", line: 0)
        #expect(
            ConsoleLog.line(for: controls)
                == "T\\r1 Bill\\ning: a\\rb\\tc\\u{0}d\\u{1B}[31me\\u{7F}f\\u{85}g\\u{9F}h\\u{2028}i\\u{2029}j\n")

        // Printable text, backslashes and non-ASCII letters stay as they are.
        let plain = Log.Record(
            source: Log.Source("Billing"), message: #"C:\new "quoted" ünïcödé 🧵"#, threadName: "main",
            date: Date(), file: "", line: 0)
        #expect(ConsoleLog.line(for: plain) == #"main Billing: C:\new "quoted" ünïcödé 🧵"# + "\n")
    }

    @Test("On standard error, a message with newlines stays one line", .exitTestOnOwnThreads)
    func consoleWritesOneLinePerRecord() async throws {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            let source = Log.Source("LogForgeChild")
            Log.enable(source)
            NamedThread.nameCurrentThread("LogForgeThread")
            Log.log(source, "paid\nLogForgeThread LogForgeChild: forged\r\n")
        }
        let output = String(decoding: try #require(result).standardErrorContent, as: UTF8.self)
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false).filter { $0.contains("LogForge") }
        #expect(lines == [#"LogForgeThread LogForgeChild: paid\nLogForgeThread LogForgeChild: forged\r\n"#])
    }

    @Test("The console writer waits out EAGAIN on a full non-blocking descriptor instead of cutting the line")
    func consoleWriterWaitsOutEAGAIN() async throws {
        let (readEnd, writeEnd) = fullPipe()
        defer {
            close(readEnd)
            close(writeEnd)
        }
        let record = Log.Record(
            source: Log.Source("LogEAGAIN"), message: "a line for a full pipe", threadName: "Writer",
            date: Date(), file: #fileID, line: #line)
        let result = LockedValue<Bool?>(nil)
        startThread(named: "LogEAGAIN") { result.value = ConsoleLog.write(record, to: writeEnd) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(result.value == nil, "the writer gave up on EAGAIN")

        let line = Array(ConsoleLog.line(for: record).utf8)
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        #expect(await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(1)) {
            while case let count = read(readEnd, &chunk, chunk.count), count > 0 { received += chunk[..<count] }
            return result.value != nil && received.last == UInt8(ascii: "\n")
        })
        #expect(result.value == true)
        #expect(received.suffix(line.count).elementsEqual(line), "the line was cut")
    }
}

extension LogDelegateTests {
    @Test("The delegate gets a message with a newline as it was logged; only the console escapes it")
    func delegateGetsTheUnescapedMessage() async throws {
        try await Self.withRecordingDelegate("newline") { source, delegate in
            Log.log(source, "one\ntwo\r\u{1B}[2K")
            #expect(await eventually { delegate.records.count == 1 })
            let record = try #require(delegate.records.first)
            #expect(record.message == "one\ntwo\r\u{1B}[2K")
            #expect(ConsoleLog.line(for: record).hasSuffix(": one\\ntwo\\r\\u{1B}[2K\n"))
        }
    }

    @Test("The console writer retries a write interrupted by a signal (EINTR) instead of dropping the line", .exitTestOnOwnThreads)
    func consoleWriterRetriesEINTR() async {
        // In a child process: it installs a signal handler.
        await #expect(processExitsWith: .success) {
            // A handler without SA_RESTART, so a blocked write(2) returns EINTR.
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { _ in }
            action.sa_flags = 0
            sigemptyset(&action.sa_mask)
            precondition(sigaction(SIGUSR2, &action, nil) == 0)

            let (readEnd, writeEnd) = fullPipe()
            setNonBlocking(writeEnd, false)  // now a write blocks until the reader drains
            let record = Log.Record(
                source: Log.Source("LogEINTR"), message: "a line that waits for the reader",
                threadName: "Writer", date: Date(), file: #fileID, line: #line)
            let writer = LockedValue<pthread_t?>(nil)
            let result = LockedValue<Bool?>(nil)
            Thread {
                // The child's threads start with SIGUSR2 blocked: let it in, or nothing interrupts.
                var signals = sigset_t()
                sigemptyset(&signals)
                sigaddset(&signals, SIGUSR2)
                pthread_sigmask(SIG_UNBLOCK, &signals, nil)
                writer.value = pthread_self()
                result.value = ConsoleLog.write(record, to: writeEnd)
            }.start()
            precondition(waitInChild { writer.value != nil })
            usleep(100_000)
            for _ in 0..<5 {  // each one lands in the blocked write
                pthread_kill(writer.value!, SIGUSR2)
                usleep(50_000)
            }
            precondition(result.value == nil, "the writer gave up on EINTR")
            let line = Array(ConsoleLog.line(for: record).utf8)
            let received = drain(readEnd, until: { result.value != nil })
            precondition(result.value == true, "the writer reported a failure")
            precondition(received.suffix(line.count).elementsEqual(line), "the line was cut")
        }
    }
}

/// A pipe whose write end is full; both ends non-blocking.
private func fullPipe() -> (readEnd: Int32, writeEnd: Int32) {
    var ends: [Int32] = [0, 0]
    precondition(pipe(&ends) == 0, "pipe failed")
    setNonBlocking(ends[0], true)
    setNonBlocking(ends[1], true)
    let page = [UInt8](repeating: UInt8(ascii: "."), count: 4096)
    while write(ends[1], page, page.count) > 0 {}
    while write(ends[1], page, 1) > 0 {}
    precondition(errno == EAGAIN, "filling the pipe failed with errno \(errno)")
    return (ends[0], ends[1])
}

private func setNonBlocking(_ descriptor: Int32, _ on: Bool) {
    let flags = fcntl(descriptor, F_GETFL)
    _ = fcntl(descriptor, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
}

/// Reads the non-blocking `descriptor` until `done` holds and nothing more comes (10 s at most).
private func drain(_ descriptor: Int32, until done: () -> Bool) -> [UInt8] {
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    let deadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < deadline {
        let count = read(descriptor, &chunk, chunk.count)
        if count > 0 {
            received += chunk[..<count]
        } else if done() {
            break
        } else {
            usleep(1_000)
        }
    }
    return received
}

// MARK: - 24: finding sources

/// The package's root directory, to read the documents the tests check.
private let packageRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

extension LogSourceTests {
    @Test("Log.Source(name) and Log.log(.init(name), …) find a name already in use without the registry's lock")
    func knownSourceNamesNeedNoLock() async throws {
        let known = "LogTests.known.\(UUID().uuidString)"
        let source = Log.Source(known)
        let off = Log.Source(known + ".off")
        Log.enable(source)
        defer { Log.disable(source) }

        // Every wait happens on threads of its own, and the lock is held for as short a time as the
        // checks allow: while it is held, other tests naming new sources block their threads, which
        // can be all of Swift concurrency's threads on a small machine.
        let (found, newNameWaited, newNameCreated, evaluations) = await onNewThread(named: "LogRegistryTest") {
            let evaluated = Counter()
            let holding = Latch()
            let letGo = Latch()
            startThread(named: "LogRegistryLock") {
                SourceRegistry.shared.withLockHeld {
                    holding.countDown()
                    letGo.wait(timeout: .seconds(5))
                }
            }
            holding.wait(timeout: .seconds(10))
            let lookedUp = Latch()
            let found = LockedValue<[Bool]>([])
            startThread(named: "LogKnownName") {
                for _ in 0..<1_000 {
                    Log.log(.init(known + ".off"), "\(evaluated.increment())")  // a disabled source made per call
                }
                let again = Log.Source(known)
                found.value = [again == source, Log.isEnabled(.init(known)), !Log.isEnabled(.init(off.name))]
                lookedUp.countDown()
            }
            lookedUp.wait(timeout: .seconds(2))
            // A new name does take the lock (so the lock above was really held).
            let created = Latch()
            startThread(named: "LogNewName") {
                _ = Log.Source("LogTests.new.\(UUID().uuidString)")
                created.countDown()
            }
            let newNameWaited = !created.wait(timeout: .milliseconds(100))
            letGo.countDown()
            return (found.value, newNameWaited, created.wait(timeout: .seconds(10)), evaluated.value)
        }
        #expect(found == [true, true, true], "a known name waited for the registry's lock")
        #expect(evaluations == 0)
        #expect(newNameWaited)
        #expect(newNameCreated)
    }

    @Test("Threads naming thousands of sources at once agree on one switch per name")
    func registryGivesOneSwitchPerName() async {
        let prefix = "LogTests.many.\(UUID().uuidString)."
        let names = (0..<3_000).map { "\(prefix)\($0)" }
        let seen = LockedValue<[[ObjectIdentifier]]>(Array(repeating: [], count: 8))
        await onThreads(8) { thread in
            // Each thread names them in its own order, so that lookups race with insertions and growth.
            var generator = SplitMix64(seed: UInt64(thread))
            var order = Array(names.indices)
            order.shuffle(using: &generator)
            var flags = [ObjectIdentifier?](repeating: nil, count: names.count)
            for index in order { flags[index] = ObjectIdentifier(Log.Source(names[index]).flag) }
            for index in names.indices where ObjectIdentifier(Log.Source(names[index]).flag) != flags[index] {
                flags[index] = nil
            }
            seen.withLock { $0[thread] = flags.map { $0! } }
        }
        let all = seen.value
        #expect(all.allSatisfy { $0 == all[0] })
        #expect(Set(all[0]).count == names.count)
        let source = Log.Source(names[1_234])
        Log.enable(source)
        #expect(Log.isEnabled(Log.Source(names[1_234])))
        #expect(!Log.isEnabled(Log.Source(names[1_235])))
        Log.disable(source)
    }

    @Test("Log.log(.init(name), …) is cheap to write, but the docs log to a stored source")
    func docsLogToAStoredSource() throws {
        for path in ["README.md", "Docs/Log.md", "Sources/ThreadKit/Log/Log.swift"] {
            let text = try String(contentsOf: packageRoot.appendingPathComponent(path), encoding: .utf8)
            #expect(!text.contains("Log.log(.init("), "\(path) makes a source per call")
            #expect(!text.contains("Log.log(Log.Source("), "\(path) makes a source per call")
            #expect(text.contains("= Log.Source(\""), "\(path) shows no stored source")
        }
    }
}

// MARK: - 20–22: delivery

/// A record of `source` logged from the calling thread, for tests that feed a ``LogDelivery`` directly.
private func makeRecord(_ source: Log.Source, _ message: String) -> Log.Record {
    Log.Record(
        source: source, message: message, threadName: NamedThread.currentName(), date: Date(),
        file: #fileID, line: #line)
}

/// A delegate that records every record it gets, of any source, with the thread that delivered it.
///
/// Its call for the record of `source` whose message is `holdOn` opens ``entered`` and then blocks
/// until ``release`` opens (30 s at most), so that a test can build a queue behind it. With a
/// `clock`, each call takes a tick when it ends, to order calls against other events.
final class GateDelegate: LogDelegate {
    struct Call: Sendable {
        let record: Log.Record
        /// The name of the thread that called the delegate.
        let deliveredOn: String
    }

    let source: Log.Source
    let holdOn: String?
    let entered = Latch()
    let release = Latch()
    private let clock: Counter?
    private let calls = Recorder<Call>()
    private let lastTick = Atomic<Int>(0)
    private let inside = Atomic<Int>(0)
    private let overlapCount = Atomic<Int>(0)
    private let onRecord: (@Sendable (Log.Record) -> Void)?

    init(
        source: Log.Source, holdOn: String? = nil, clock: Counter? = nil,
        onRecord: (@Sendable (Log.Record) -> Void)? = nil
    ) {
        self.source = source
        self.holdOn = holdOn
        self.clock = clock
        self.onRecord = onRecord
    }

    func log(_ record: Log.Record) {
        if inside.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
            overlapCount.add(1, ordering: .relaxed)
        }
        defer { inside.subtract(1, ordering: .sequentiallyConsistent) }
        calls.append(Call(record: record, deliveredOn: NamedThread.currentName()))
        if record.source == source, record.message == holdOn {
            entered.countDown()
            release.wait(timeout: .seconds(30))
        }
        if record.source == source { onRecord?(record) }
        if let clock { lastTick.store(clock.increment(), ordering: .relaxed) }
    }

    /// A delegate for a source of its own, installed, that holds up the delivery of `"first"`,
    /// which a thread named `caller` logs (then calling `afterwards`): returns once it is held,
    /// with the function that uninstalls the delegate (call it on the way out).
    static func holdingFirst(
        _ label: String, loggedOn caller: String, sourceLocation: SourceLocation = #_sourceLocation,
        afterwards: @escaping @Sendable () -> Void = {}
    ) async -> (source: Log.Source, delegate: GateDelegate, uninstall: () -> Void) {
        let source = uniqueSource(label)
        let delegate = GateDelegate(source: source, holdOn: "first")
        let uninstall = delegate.install()
        startThread(named: caller) {
            Log.log(source, "first")
            afterwards()
        }
        #expect(await eventually { delegate.entered.isOpen }, "the delivery of \"first\" never began", sourceLocation: sourceLocation)
        return (source, delegate, uninstall)
    }

    /// Makes this delegate `Log.delegate`, with its source enabled. Call what it returns on the way
    /// out (`defer`): it lets a held record go, disables the source and clears the delegate.
    func install() -> () -> Void {
        Log.delegate = self
        Log.enable(source)
        return { [self] in
            release.countDown()
            Log.disable(source)
            Log.delegate = nil
        }
    }

    /// Every call so far, in order.
    var all: [Call] { calls.values }
    /// The messages of `source`'s records, in the order delivered.
    var messages: [String] { all.filter { $0.record.source == source }.map(\.record.message) }
    /// Calls that began while another was still running.
    var overlaps: Int { overlapCount.load(ordering: .relaxed) }
    /// The clock's tick at the end of the last call (0 before any).
    var lastCallEnded: Int { lastTick.load(ordering: .relaxed) }
}

/// A delegate whose `deinit` logs to `source`, and whose `log(_:)` may hand over to a successor.
final class LogsInDeinit: LogDelegate {
    let source: Log.Source
    let successor: (any LogDelegate)?

    init(source: Log.Source, handsOverTo successor: (any LogDelegate)? = nil) {
        self.source = source
        self.successor = successor
    }

    func log(_ record: Log.Record) {
        if let successor, record.source == source, record.message == "hand over" { Log.delegate = successor }
    }

    deinit {
        Log.log(source, "deinit of \(successor == nil ? "a replaced" : "a handing-over") delegate")
    }
}

extension LogDelegateTests {
    @Test("Replacing a delegate whose deinit logs hangs neither the setter nor other loggers", .exitTestOnOwnThreads)
    func replacingADelegateWhoseDeinitLogs() async {
        // In a child process: on failure the log's lock stays taken for good.
        await #expect(processExitsWith: .success) {
            let source = Log.Source("LogDeinitChild")
            Log.enable(source)
            let next = LogRecordingDelegate(source: source)
            Log.delegate = LogsInDeinit(source: source)  // only the log holds it

            let setterReturned = Latch()
            Thread {
                Log.delegate = next  // releases the replaced delegate; its deinit logs
                setterReturned.countDown()
            }.start()
            precondition(setterReturned.wait(timeout: .seconds(10)), "the setter hung in the replaced delegate's deinit")
            let logReturned = Latch()
            Thread {
                Log.log(source, "after")
                logReturned.countDown()
            }.start()
            precondition(logReturned.wait(timeout: .seconds(10)), "Log.log hung after the delegate was replaced")
            precondition(waitInChild { next.records.count >= 2 }, "records missing: \(next.records.map(\.message))")
            precondition(next.records.map(\.message) == ["deinit of a replaced delegate", "after"], "\(next.records.map(\.message))")

            // A delegate that hands over from inside log() is released by the deliverer, after its call.
            let last = LogRecordingDelegate(source: source)
            Log.delegate = LogsInDeinit(source: source, handsOverTo: last)
            let handedOver = Latch()
            Thread {
                Log.log(source, "hand over")
                Log.log(source, "to the successor")
                handedOver.countDown()
            }.start()
            precondition(handedOver.wait(timeout: .seconds(10)), "a hand-over from inside log() hung")
            precondition(waitInChild { last.records.count >= 2 }, "records missing: \(last.records.map(\.message))")
            precondition(
                last.records.map(\.message) == ["deinit of a handing-over delegate", "to the successor"],
                "\(last.records.map(\.message))")
            Log.delegate = nil
        }
    }

    @Test("One Log.log call delivers its own record and at most 100 queued by others; the delivery thread delivers the rest")
    func oneCallDeliversABoundedNumberOfRecords() async throws {
        let caller = KernelThreads.uniqueName("LogCaller")
        let callerReturned = Latch()
        let (source, delegate, uninstall) = await GateDelegate.holdingFirst("bounded", loggedOn: caller) {
            callerReturned.countDown()
        }
        defer { uninstall() }
        // While the caller delivers, logging only queues: none of these calls delivers anything.
        let others = 500
        for index in 0..<others { Log.log(source, "\(index)") }
        delegate.release.countDown()
        #expect(await eventually(timeout: .seconds(10)) { callerReturned.isOpen }, "the caller never returned")
        // Nobody logs any more: the delivery thread must still deliver everything.
        #expect(await eventually(timeout: .seconds(10)) { delegate.messages.count == 1 + others })
        #expect(delegate.messages == ["first"] + (0..<others).map(String.init))

        let calls = delegate.all
        // Counted over every source: a stray record of another test would still be the caller's to deliver.
        #expect(calls.filter { $0.deliveredOn == caller }.count == 1 + 100)
        let handedOn = calls.filter { $0.record.source == source && $0.deliveredOn != caller }
        #expect(handedOn.count == others - 100)
        #expect(handedOn.allSatisfy { $0.deliveredOn == "ThreadKit Log" })
        #expect(delegate.overlaps == 0)
    }

    @Test("Over 32,768 waiting records, records are dropped, counted exactly, and the count is logged once")
    func theBacklogIsBoundedAndDropsAreCounted() async throws {
        let (source, delegate, uninstall) = await GateDelegate.holdingFirst("backlog", loggedOn: "LogBacklog")
        defer { uninstall() }
        let logged = 40_000
        for index in 0..<logged { Log.log(source, "\(index)") }
        delegate.release.countDown()

        // Everything accepted, then exactly one notice: `dropped <count> records: …`.
        #expect(await eventually(timeout: .seconds(20)) { delegate.messages.last?.hasPrefix("dropped ") == true })
        try await Task.sleep(for: .milliseconds(100))  // nothing may follow it
        let messages = delegate.messages
        let notices = messages.filter { $0.hasPrefix("dropped ") }
        try #require(notices.count == 1, "\(notices)")
        #expect(notices[0].hasSuffix(" records: 32768 were already waiting for delivery"))
        let dropped = try #require(Int(notices[0].dropFirst("dropped ".count).prefix { $0.isNumber }))
        let delivered = messages.dropFirst().dropLast()  // without "first" and the notice
        #expect(messages.first == "first")
        // The oldest records are kept, in order; the count covers exactly the rest.
        #expect(Array(delivered) == (0..<delivered.count).map(String.init))
        #expect(delivered.count + dropped == logged)
        #expect(delivered.count <= 32_768)
        // Only another test's stray record could take a slot from this one.
        #expect(delivered.count >= 32_768 - 5)
    }

    @Test("A record goes to the delegate in force when it was logged; the setter waits for its delivery, and the old delegate is never called once the setter returned")
    func recordsGoToTheDelegateInForceWhenLogged() async throws {
        let source = uniqueSource("swap")
        let clock = Counter()
        let old = GateDelegate(source: source, holdOn: "first", clock: clock)
        let new = GateDelegate(source: source, clock: clock)
        let uninstall = old.install()
        defer { uninstall() }

        startThread(named: "LogSwapFirst") { Log.log(source, "first") }
        #expect(await eventually { old.entered.isOpen })
        for index in 0..<10 { Log.log(source, "old \(index)") }  // queued for `old`

        let setterReturned = Latch()
        let returnTick = LockedValue(0)
        startThread(named: "LogSwapSetter") {
            Log.delegate = new
            returnTick.value = clock.increment()
            setterReturned.countDown()
            for index in 0..<3 { Log.log(source, "new \(index)") }
        }
        try await Task.sleep(for: .milliseconds(200))
        #expect(!setterReturned.isOpen, "the setter returned while the old delegate was still being called")
        old.release.countDown()
        #expect(await eventually(timeout: .seconds(10)) { setterReturned.isOpen }, "the setter never returned")
        #expect(await eventually(timeout: .seconds(10)) { new.messages.count == 3 })
        #expect(old.messages == ["first"] + (0..<10).map { "old \($0)" })
        #expect(new.messages == (0..<3).map { "new \($0)" })
        #expect(old.lastCallEnded < returnTick.value, "the old delegate was called after the setter returned")
        #expect(Log.delegate === new)
    }

    @Test("A delegate that sets Log.delegate from inside log() does not deadlock; records queued for it still reach it, later ones the new delegate")
    func delegateSetFromInsideLog() async throws {
        let source = uniqueSource("handover")
        let new = GateDelegate(source: source)
        let old = GateDelegate(source: source, holdOn: "switch") { record in
            guard record.message == "switch" else { return }
            Log.delegate = new  // on the deliverer's own thread: returns at once
            Log.log(record.source, "logged after the switch")
        }
        let uninstall = old.install()
        defer { uninstall() }

        let returned = Latch()
        startThread(named: "LogHandOver") {
            Log.log(source, "switch")
            returned.countDown()
        }
        #expect(await eventually { old.entered.isOpen })
        for index in 0..<3 { Log.log(source, "queued \(index)") }  // logged while `old` is in force
        old.release.countDown()
        #expect(await eventually(timeout: .seconds(10)) { returned.isOpen }, "deadlocked")
        #expect(await eventually(timeout: .seconds(10)) { new.messages.count == 1 })
        #expect(old.messages == ["switch", "queued 0", "queued 1", "queued 2"])
        #expect(new.messages == ["logged after the switch"])
    }
}

/// A ``LogDelivery`` of its own per test, with small bounds, so that counts are exact whatever other
/// tests log through ``Log`` meanwhile.
@Suite struct LogDeliveryTests {
    @Test("A caller delivers its own record and at most its budget; the delivery thread delivers the rest, then exits when idle")
    func callerBudgetAndDeliveryThread() async throws {
        let workerName = KernelThreads.uniqueName("LogDlv")
        let delivery = LogDelivery(limits: .init(
            maxBacklog: 100, callerBudget: 5, workerKeepAlive: .milliseconds(200), workerName: workerName))
        let source = uniqueSource("budget")

        for _ in 0..<2 {  // the second round needs a new delivery thread: the first has exited
            let delegate = GateDelegate(source: source, holdOn: "first")
            delivery.setDelegate(delegate)
            defer { delegate.release.countDown() }
            let caller = KernelThreads.uniqueName("LogCall")
            let callerReturned = Latch()
            startThread(named: caller) {
                delivery.deliver(makeRecord(source, "first"))
                callerReturned.countDown()
            }
            #expect(await eventually { delegate.entered.isOpen })
            for index in 0..<20 { delivery.deliver(makeRecord(source, "\(index)")) }
            delegate.release.countDown()
            #expect(await eventually(timeout: .seconds(10)) { callerReturned.isOpen })
            // Nobody logs any more: the delivery thread must still deliver everything.
            #expect(await eventually(timeout: .seconds(10)) { delegate.all.count == 21 })
            let calls = delegate.all
            #expect(calls.map(\.record.message) == ["first"] + (0..<20).map(String.init))
            #expect(calls.prefix(1 + 5).allSatisfy { $0.deliveredOn == caller })
            #expect(calls.dropFirst(1 + 5).allSatisfy { $0.deliveredOn == workerName })
            #expect(delegate.overlaps == 0)
            #expect(await eventually(timeout: .seconds(10)) { KernelThreads.count(withPrefix: workerName) == 0 },
                    "the idle delivery thread did not exit")
        }
    }

    @Test("Records that find the backlog full are dropped, and one notice per source says exactly how many")
    func dropsAreCountedPerSource() async throws {
        let delivery = LogDelivery(limits: .init(
            maxBacklog: 20, callerBudget: 1_000, workerKeepAlive: .seconds(1), workerName: KernelThreads.uniqueName("LogDlv")))
        let source = uniqueSource("drops")
        let other = uniqueSource("drops.other")
        let delegate = GateDelegate(source: source, holdOn: "first")
        delivery.setDelegate(delegate)
        defer { delegate.release.countDown() }

        startThread(named: "LogDrops") { delivery.deliver(makeRecord(source, "first")) }
        #expect(await eventually { delegate.entered.isOpen })
        for index in 0..<50 { delivery.deliver(makeRecord(source, "\(index)")) }
        for index in 0..<5 { delivery.deliver(makeRecord(other, "other \(index)")) }
        delegate.release.countDown()
        #expect(await eventually(timeout: .seconds(10)) { delegate.all.count == 1 + 20 + 2 })
        try await Task.sleep(for: .milliseconds(50))
        let calls = delegate.all
        #expect(calls.map(\.record.message) == ["first"] + (0..<20).map(String.init) + [
            "dropped 30 records: 20 were already waiting for delivery",
            "dropped 5 records: 20 were already waiting for delivery",
        ])
        #expect(calls.suffix(2).map(\.record.source) == [source, other])

        // Room again: nothing is dropped, and no further notice comes.
        for index in 0..<10 { delivery.deliver(makeRecord(other, "later \(index)")) }
        #expect(await eventually { delegate.all.count == 23 + 10 })
        #expect(delegate.all.suffix(10).map(\.record.message) == (0..<10).map { "later \($0)" })
    }

    @Test("After the setter returns, a record logged under the old delegate is never handed to the new one")
    func setterWaitsForRecordsOfTheOldDelegate() async throws {
        let delivery = LogDelivery(limits: .init(
            maxBacklog: 1_000, callerBudget: 2, workerKeepAlive: .seconds(1), workerName: KernelThreads.uniqueName("LogDlv")))
        let source = uniqueSource("generations")
        let clock = Counter()
        let delegates = (0..<4).map { GateDelegate(source: source, holdOn: $0 == 0 ? "0.first" : nil, clock: clock) }
        delivery.setDelegate(delegates[0])
        defer { delegates[0].release.countDown() }

        startThread(named: "LogGenFirst") { delivery.deliver(makeRecord(source, "0.first")) }
        #expect(await eventually { delegates[0].entered.isOpen })
        let returnTicks = LockedValue<[Int]>([])
        let setterDone = Latch()
        startThread(named: "LogGenSetter") {
            for generation in 0..<3 {
                for index in 0..<10 { delivery.deliver(makeRecord(source, "\(generation).\(index)")) }
                delivery.setDelegate(delegates[generation + 1])
                let tick = clock.increment()
                returnTicks.withLock { $0.append(tick) }
            }
            for index in 0..<10 { delivery.deliver(makeRecord(source, "3.\(index)")) }
            setterDone.countDown()
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(returnTicks.value.isEmpty, "the setter returned while the old delegate was being called")
        delegates[0].release.countDown()
        #expect(await eventually(timeout: .seconds(10)) { setterDone.isOpen })
        #expect(await eventually(timeout: .seconds(10)) { delegates[3].messages.count == 10 })
        #expect(delegates[0].messages == ["0.first"] + (0..<10).map { "0.\($0)" })
        for generation in 1...3 {
            #expect(delegates[generation].messages == (0..<10).map { "\(generation).\($0)" })
        }
        for generation in 0..<3 {
            #expect(delegates[generation].lastCallEnded < returnTicks.value[generation])
        }
    }
}

// MARK: - 26: the swift-log adapter

extension LogSourceTests {
    @Test("The swift-log adapter in Docs/Log.md logs at a level a default swift-log Logger prints")
    func swiftLogAdapterPrintsByDefault() throws {
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Docs/Log.md"), encoding: .utf8)
        let blocks = guide.components(separatedBy: "```").enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
        let adapter = try #require(blocks.first { $0.contains(": LogDelegate") && $0.contains("Logger(") })
        let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
        // swift-log's Logger starts at .info unless its logLevel is set.
        let threshold = levels.first { adapter.contains("logLevel = .\($0)") } ?? "info"
        let used = levels.filter { adapter.contains("logger.\($0)(") || adapter.contains("level: .\($0)") }
        #expect(!used.isEmpty, "the adapter logs nothing")
        for level in used {
            #expect(levels.firstIndex(of: level)! >= levels.firstIndex(of: threshold)!,
                    "logs at .\(level), below the logger's level .\(threshold): swift-log drops it")
        }
    }
}
