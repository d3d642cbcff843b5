import Foundation
import Testing
import ThreadKitTestSupport
@testable import ThreadKit
#if canImport(Glibc)
import Glibc
#endif

/// The live parts of the diagnostics core: threads' activities, blocked waits and their holders,
/// the registry of components, and the dump on a signal (in child processes).
@Suite struct DiagnosticsTests {
    /// Something to wait for, held by a thread the test names.
    final class Gate: DiagnosticsWaitTarget, @unchecked Sendable {
        // Sendable: `holder` is written before the waiting thread starts, and read after.
        let waitDescription: String
        nonisolated(unsafe) var holder: ThreadActivity?
        init(_ name: String) { waitDescription = "gate \"\(name)\"" }
        var holdingThread: ThreadActivity? { holder }
    }

    /// A component made by hand, with a name of its own.
    final class Probe: DiagnosticsReporting {
        let name: String
        init(_ name: String) {
            self.name = name
            DiagnosticsRegistry.add(self)
        }
        deinit { DiagnosticsRegistry.remove(ObjectIdentifier(self)) }
        func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
            Snapshot.Component(kind: "Probe", name: name, metrics: [Snapshot.Metric("reads_total", .counter, 1, help: "Reads.")])
        }
    }

    @Test func aThreadBlockedInAWaitIsAnEdgeToItsHolderAndListedAmongOtherThreads() async throws {
        let gate = Gate("diag-edge")
        let holderReady = Latch()
        let holderTID = LockedValue<Int32>(0)
        let release = Latch()
        Thread {
            gate.holder = ThreadActivity.current
            holderTID.value = ThreadActivity.current.kernelThreadID
            holderReady.countDown()
            release.wait()
        }.start()
        #expect(holderReady.wait(timeout: .seconds(10)))
        let waiterTID = LockedValue<Int32>(0)
        let waiting = Latch()
        let done = Latch()
        let waiterName = LockedValue("")
        let waiter = Thread {
            waiterTID.value = ThreadActivity.current.kernelThreadID
            waiterName.value = ThreadActivity.current.name
            ThreadActivity.current.blocked("test wait", on: gate) {
                waiting.countDown()
                _ = release.wait(timeout: .seconds(20))
            }
            done.countDown()
        }
        waiter.start()
        #expect(waiting.wait(timeout: .seconds(10)))
        defer { release.countDown() }
        let snapshot = Diagnostics.snapshot(longWaitsOver: .zero)
        let edge = try #require(snapshot.waits.first { $0.waitsFor == "gate \"diag-edge\"" })
        #expect(edge.thread == Snapshot.ThreadReference(name: waiterName.value, kernelThreadID: waiterTID.value))
        #expect(edge.kind == "test wait")
        #expect(edge.holder?.kernelThreadID == holderTID.value)
        #expect(edge.seconds >= 0 && edge.seconds < 30)
        let listed = try #require(snapshot.otherThreads.first { $0.kernelThreadID == waiterTID.value })
        #expect(listed.state == .blocked)
        #expect(listed.waitsFor == "gate \"diag-edge\"")
        #expect(listed.name == waiterName.value)
        #expect(snapshot.longWaits.contains(edge))
        #expect(snapshot.description.contains("\"\(waiterName.value)\" (tid \(waiterTID.value)) waits "))
        #expect(snapshot.description.contains(" in test wait for gate \"diag-edge\", held by "))
        release.countDown()
        #expect(done.wait(timeout: .seconds(10)))
        // Once the wait is over, the edge is gone.
        #expect(!Diagnostics.snapshot().waits.contains { $0.waitsFor == "gate \"diag-edge\"" })
    }

    @Test func aLabelIsTheThreadsWorkWhileItRunsThenTheStateBeforeComesBack() async {
        let states = await onNewThread { () -> [ThreadActivity.State] in
            let activity = ThreadActivity.current
            activity.sleeping(until: MonotonicInstant.now().advanced(by: .seconds(5)))
            let inside = ThreadActivity.labelled("diag-label") { activity.read() }
            return [inside, activity.read()]
        }
        #expect(states[0].phase == .running)
        #expect(states[0].work == "diag-label")
        #expect(states[1].phase == .sleeping)
        #expect(states[1].until != nil)
        #expect(states[1].work == nil)
    }

    @Test func aThreadsKernelIDIsTheOneTheKernelGivesIt() async {
        let ids = await onNewThread { (ThreadActivity.current.kernelThreadID, KernelThreads.currentID()) }
        #expect(ids.0 == ids.1)
    }

    @Test func aComponentIsListedWhileAliveAndLeavesOnDeinit() throws {
        var probe: Probe? = Probe("diag-probe")
        let listed = Diagnostics.snapshot().components.filter { $0.kind == "Probe" && $0.name == "diag-probe" }
        #expect(listed.count == 1)
        let families = try PrometheusParser.parse(Diagnostics.prometheusText())
        #expect(PrometheusParser.value(families, "threadkit_probe_reads_total", ["name": "diag-probe"]) == 1)
        withExtendedLifetime(probe) {}
        probe = nil
        #expect(!Diagnostics.snapshot().components.contains { $0.kind == "Probe" && $0.name == "diag-probe" })
    }

    /// A component whose first report waits until the test lets it go on.
    final class SlowProbe: DiagnosticsReporting {
        let reporting = Latch()
        let proceed = Latch()
        let deinitThread = LockedValue<Int32>(0)
        private let first = LockedValue(true)
        init() { DiagnosticsRegistry.add(self) }
        deinit {
            DiagnosticsRegistry.remove(ObjectIdentifier(self))
            deinitThread.value = KernelThreads.currentID()
        }
        func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
            let isFirst = first.withLock { first in defer { first = false }; return first }
            if isFirst {
                reporting.countDown()
                _ = proceed.wait(timeout: .seconds(20))
            }
            // A closure that retains and releases the probe, which may be in its deinit by now.
            let name = { [self] in self.name }()
            return Snapshot.Component(kind: "Probe", name: name)
        }
        let name = "diag-slow-probe"
    }

    @Test func aComponentReleasedWhileItIsReadDeinitsWhenItsReportEndsAndNothingWaitsForIt() async throws {
        let probe = LockedValue<SlowProbe?>(SlowProbe())
        let reporting = probe.value!.reporting
        let proceed = probe.value!.proceed
        let deinitThread = probe.value!.deinitThread
        let snapshotDone = Latch()
        Thread {
            _ = Diagnostics.snapshot()
            snapshotDone.countDown()
        }.start()
        #expect(reporting.wait(timeout: .seconds(10)))
        // The last other reference goes while the snapshot reads the probe: the release returns
        // at once, and other snapshots are not held up by the slow report.
        let released = Latch()
        Thread {
            probe.value = nil
            released.countDown()
        }.start()
        #expect(released.wait(timeout: .seconds(10)))
        #expect(Diagnostics.snapshot().components.contains { $0.name == "diag-slow-probe" })
        #expect(deinitThread.value == 0)
        proceed.countDown()
        #expect(snapshotDone.wait(timeout: .seconds(10)))
        // The probe deinitialized once the reads of it ended (another test's snapshot may have
        // read it last), on a reading thread, and left the inventory.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { deinitThread.value != 0 })
        #expect(!Diagnostics.snapshot().components.contains { $0.name == "diag-slow-probe" })
    }

    @Test func componentsAreListedInTheOrderTheyWereCreated() {
        let first = Probe("diag-order-1")
        let second = Probe("diag-order-2")
        let names = Diagnostics.snapshot().components.map(\.name).filter { $0.hasPrefix("diag-order-") }
        #expect(names == ["diag-order-1", "diag-order-2"])
        withExtendedLifetime((first, second)) {}
    }

    // MARK: - The dump on a signal, in child processes

    @Test(.exitTestOnOwnThreads) func aSignalWritesTheDumpToStandardErrorByDefault() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            let probe = Probe("diag-signal-probe")
            // Standard error goes to a pipe this process reads, so that it knows when the dump is
            // there; then what came is written to the real standard error for the parent to check.
            let saved = dup(STDERR_FILENO)
            var ends: [Int32] = [0, 0]
            guard saved >= 0, pipe(&ends) == 0, dup2(ends[1], STDERR_FILENO) >= 0 else { exit(3) }
            // The thread that asks blocks the signal, as a program that waits for signals with
            // sigwait does: the dump's thread, which it starts, still takes it.
            var blocked = sigset_t()
            sigemptyset(&blocked)
            sigaddset(&blocked, SIGUSR1)
            pthread_sigmask(SIG_BLOCK, &blocked, nil)
            Diagnostics.dumpOnSignal(SIGUSR1)
            kill(getpid(), SIGUSR1)
            let text = DiagnosticsTests.read(ends[0], until: "reads_total=1\n")
            dup2(saved, STDERR_FILENO)
            FileHandle.standardError.write(Data((text ?? "no dump").utf8))
            withExtendedLifetime(probe) {}
            exit(text == nil ? 4 : 0)
        }
        let output = standardError(of: result) ?? ""
        #expect(output.hasPrefix("ThreadKit dump "))
        #expect(output.contains("\nProbe \"diag-signal-probe\"\n  reads_total=1\n"))
    }

    @Test(.exitTestOnOwnThreads) func aSignalCanWriteTheDumpToAFileAndAFloodOfSignalsIsSurvived() async {
        await #expect(processExitsWith: .success) {
            let probe = Probe("diag-file-probe")
            let path = NSTemporaryDirectory() + "/threadkit-dump-\(getpid()).txt"
            Diagnostics.dumpOnSignal(SIGUSR1, to: .file(path: path))
            for _ in 0..<200 { kill(getpid(), SIGUSR1) }
            let deadline = ContinuousClock.now + .seconds(20)
            var text = ""
            while ContinuousClock.now < deadline, !text.contains("reads_total=1\n") {
                usleep(20_000)
                text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            }
            unlink(path)
            withExtendedLifetime(probe) {}
            let dumps = text.components(separatedBy: "ThreadKit dump ").count - 1
            // At least one dump; never more than the signals (bytes read together make one).
            exit(dumps >= 1 && dumps <= 200 ? 0 : 6)
        }
    }

    @Test(.exitTestOnOwnThreads) func anUncatchableSignalIsRefusedByName() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            Diagnostics.dumpOnSignal(SIGKILL)
        }
        expectMessage(result, contains: ["Diagnostics.dumpOnSignal(_:to:): signal must be a catchable signal number, got 9"])
    }

    /// Reads `descriptor` until the text holds `marker`, for at most 20 s; `nil` if it never did.
    static func read(_ descriptor: Int32, until marker: String) -> String? {
        let deadline = ContinuousClock.now + .seconds(20)
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) > 0 else { continue }
            let count = Glibc.read(descriptor, &buffer, buffer.count)
            guard count > 0 else { return nil }
            bytes += buffer[..<count]
            let text = String(decoding: bytes, as: UTF8.self)
            if text.contains(marker) { return text }
        }
        return nil
    }
}
