// Catches hangs: a driver that stops making progress, or a final quiesce that does not finish.
import Foundation
import Synchronization
import ToolHarness

/// One driver's sign of life, watched by the ``Watchdog``.
final class Heartbeat: Sendable {
    let name: String
    private let beats = Atomic<Int>(0)
    private let finished = Atomic<Bool>(false)
    private let activity = Mutex("starting")

    init(name: String) {
        self.name = name
    }

    /// One step done.
    func beat() {
        beats.wrappingAdd(1, ordering: .relaxed)
    }

    /// What the driver is about to do, for a hang report; also a beat. Called at a coarse grain.
    func doing(_ what: String) {
        activity.withLock { $0 = what }
        beat()
    }

    /// The driver has quiesced everything it made and returned.
    func finish() {
        doing("finished")
        finished.store(true, ordering: .releasing)
    }

    var isFinished: Bool { finished.load(ordering: .acquiring) }
    var beatCount: Int { beats.load(ordering: .relaxed) }
    var currentActivity: String { activity.withLock { $0 } }
}

/// A thread that watches the drivers and the final quiesce, and samples the process's peaks.
///
/// A driver whose heartbeat does not move for ``stallLimit``, or a final quiesce that takes longer
/// than ``quiesceLimit``, is a hang: the watchdog prints what every driver was doing and what is
/// outstanding, and exits with status 1 at once (the hung threads cannot be joined).
final class Watchdog: Sendable {
    static let stallLimit = Duration.seconds(60)
    static let quiesceLimit = Duration.seconds(60)

    private let heartbeats: [Heartbeat]
    /// What is outstanding, for a hang report.
    private let outstanding: @Sendable () -> String
    private let quiesce = Mutex<(stage: String, deadline: ContinuousClock.Instant)?>(nil)
    private let stopped = Atomic<Bool>(false)
    private let peakResident = Atomic<Int>(0)
    private let peakThreads = Atomic<Int>(0)

    init(heartbeats: [Heartbeat], outstanding: @escaping @Sendable () -> String) {
        self.heartbeats = heartbeats
        self.outstanding = outstanding
    }

    /// The most resident memory and threads seen, sampled four times a second.
    var peaks: (residentBytes: Int, threads: Int) {
        (peakResident.load(ordering: .relaxed), peakThreads.load(ordering: .relaxed))
    }

    func start() {
        let thread = Thread { [self] in watch() }
        thread.name = "soak watchdog"
        thread.start()
    }

    /// The final quiesce begins: from now on it must end within ``quiesceLimit``.
    func beginQuiesce(_ stage: String) {
        quiesce.withLock { $0 = (stage, ContinuousClock.now + Self.quiesceLimit) }
    }

    /// The quiesce moves on to `stage`, for a hang report; the deadline stays.
    func quiesceStage(_ stage: String) {
        quiesce.withLock { $0?.stage = stage }
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    private func watch() {
        var lastBeats = heartbeats.map { $0.beatCount }
        var lastChange = heartbeats.map { _ in ContinuousClock.now }
        while !stopped.load(ordering: .acquiring) {
            sleep(for: .milliseconds(250))
            peakResident.max(ProcessReadings.residentBytes(), ordering: .relaxed)
            peakThreads.max(ProcessReadings.threadCount(), ordering: .relaxed)
            let now = ContinuousClock.now
            for (index, heartbeat) in heartbeats.enumerated() where !heartbeat.isFinished {
                let beats = heartbeat.beatCount
                if beats != lastBeats[index] {
                    lastBeats[index] = beats
                    lastChange[index] = now
                } else if now - lastChange[index] > Self.stallLimit {
                    hang("driver \(heartbeat.name) has made no progress for \(Self.stallLimit)")
                }
            }
            if let (stage, deadline) = quiesce.withLock({ $0 }), now > deadline {
                hang("the final quiesce did not finish within \(Self.quiesceLimit); it was at: \(stage)")
            }
        }
    }

    private func hang(_ reason: String) -> Never {
        printLine("HANG: \(reason)")
        for heartbeat in heartbeats {
            printLine("  \(heartbeat.name): \(heartbeat.isFinished ? "finished" : heartbeat.currentActivity)")
        }
        printLine(outstanding())
        printLine("FAIL: hang")
        _exit(1)
    }
}
