// The one shape of every driver: set up, step until the soak stops, quiesce. Most drivers churn
// subjects (pools, queues, threads, timers) through ``Generations``; and every task they submit
// does a ``Chore`` when it runs.
import ThreadKit
import SeededRandom
import ToolHarness

/// Drives one part of ThreadKit from its own thread until the soak stops, then quiesces and checks
/// everything it made.
///
/// A driver says what it makes, what one step does and how it ends; ``drive(_:_:seed:logger:)``
/// is the same loop for every driver: it beats the heartbeat after each step and finishes it once
/// the driver has quiesced.
protocol Driver: Sendable {
    /// What the driver makes and drives.
    associatedtype Subjects

    /// Names the driver's thread and its lines in a hang report.
    var name: String { get }

    /// Makes what the driver drives first.
    func setUp(_ run: inout DriverRun) -> Subjects

    /// One step: a burst of calls, a retirement, a rest.
    func step(_ subjects: inout Subjects, _ run: inout DriverRun)

    /// Once the soak stops: disposes, waits for and checks what the driver made.
    func quiesce(_ subjects: inout Subjects, _ run: inout DriverRun)
}

extension Driver {
    /// Runs the driver on the calling thread until `soak.isStopping`, then quiesces it.
    ///
    /// - Parameters:
    ///   - seed: Seeds the driver's random choices.
    ///   - logger: The driver's number in the log records it numbers (1 and up).
    func drive(_ soak: Soak, _ heartbeat: Heartbeat, seed: UInt64, logger: Int) {
        var run = DriverRun(soak: soak, heartbeat: heartbeat, seed: seed, logger: logger)
        var subjects = setUp(&run)
        while !soak.isStopping {
            step(&subjects, &run)
            heartbeat.beat()
        }
        quiesce(&subjects, &run)
        heartbeat.finish()
    }
}

/// What one driver's thread works with: the soak, its heartbeat, its seeded random choices, and
/// the records it logs as a logger of its own.
struct DriverRun {
    let soak: Soak
    let heartbeat: Heartbeat
    var random: SplitMix64
    private var sequence: LogSequence

    init(soak: Soak, heartbeat: Heartbeat, seed: UInt64, logger: Int) {
        self.soak = soak
        self.heartbeat = heartbeat
        random = SplitMix64(seed: seed)
        sequence = LogSequence(logger: logger)
    }

    /// Logs the driver's next numbered record on the soak's source.
    mutating func logNext() {
        Log.log(.soak, sequence.next(soak.logs))
    }

    /// What the driver is about to do, for a hang report.
    func doing(_ what: String) {
        heartbeat.doing(what)
    }
}

/// Something a driver makes, drives for a while, then retires and checks: a pool, a throttled
/// queue, a dedicated thread, a private timer. Owned by one driver thread.
protocol Subject: CustomStringConvertible {
    /// A new one called `name`, its settings and its lifetime drawn from `random`.
    init(name: String, soak: Soak, random: inout SplitMix64)

    /// When its driver retires it and makes the next one.
    var retireAt: ContinuousClock.Instant { get }

    /// One random operation on it.
    mutating func step(_ run: inout DriverRun)

    /// Disposes it (where the soak disposes it), waits for what it accepted, and checks that every
    /// unit it accepted ran, was handed back or was cancelled.
    mutating func retire(_ run: inout DriverRun)
}

/// A fixed number of subjects, each replaced by the next generation once its time is up:
/// "Soak pools-1#1", "Soak pools-1#2"…
struct Generations<Member: Subject> {
    private let driver: String
    private var made = 0
    private var members: [Member] = []

    /// Makes `count` subjects, named after `driver`.
    init(_ count: Int, of driver: String, _ run: inout DriverRun) {
        precondition(count >= 1, "a driver drives at least one subject, got \(count)")
        self.driver = driver
        for _ in 0..<count { members.append(make(&run)) }
        run.doing(activity)
    }

    /// What the heartbeat says while the subjects are driven.
    private var activity: String {
        "driving " + members.map(\.description).joined(separator: ", ")
    }

    private mutating func make(_ run: inout DriverRun) -> Member {
        made += 1
        return Member(name: "Soak \(driver)#\(made)", soak: run.soak, random: &run.random)
    }

    /// Picks a subject at random: retires it and makes its successor if its time is up, steps it otherwise.
    mutating func step(_ run: inout DriverRun) {
        let index = Int.random(in: members.indices, using: &run.random)
        guard ContinuousClock.now >= members[index].retireAt else {
            members[index].step(&run)
            return
        }
        run.doing("retiring \(members[index])")
        members[index].retire(&run)
        run.logNext()
        members[index] = make(&run)
        run.doing(activity)
    }

    /// Does `body` to every subject.
    mutating func forEach(_ body: (inout Member) -> Void) {
        for index in members.indices { body(&members[index]) }
    }

    /// Retires every subject, at the end of the soak.
    mutating func retireAll(_ run: inout DriverRun) {
        forEach { member in
            run.doing("retiring \(member)")
            member.retire(&run)
        }
    }
}

/// A driver that only churns subjects of one kind, `count` at a time: the pools and the throttled
/// queues, and the dedicated threads (whose chains are a step of the thread).
struct ChurnDriver<Member: Subject>: Driver {
    let name: String
    let count: Int

    func setUp(_ run: inout DriverRun) -> Generations<Member> {
        Generations(count, of: name, &run)
    }

    func step(_ subjects: inout Generations<Member>, _ run: inout DriverRun) {
        subjects.step(&run)
    }

    func quiesce(_ subjects: inout Generations<Member>, _ run: inout DriverRun) {
        subjects.retireAll(&run)
    }
}

/// What a soak task does when it runs, after counting its unit as ran.
enum Chore: Sendable {
    case nothing
    /// Sleeps, so that queues fill up and there is work to cancel, refuse and hand back.
    case nap(Duration)
    /// Logs a record on the soak's source (unordered: many threads share logger 0).
    case log
    /// Submits a task to the soak's shared pool: work moving from one part to another.
    case handOff

    /// Mostly nothing, sometimes a nap of up to `longestNap`, sometimes a log record.
    static func random(_ random: inout SplitMix64, longestNap: Duration = .microseconds(300)) -> Chore {
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<10: .nap(.nanoseconds(Int64.random(in: 0...Int64(longestNap.nanoseconds), using: &random)))
        case 10..<15: .log
        default: .nothing
        }
    }

    func perform(in soak: Soak) {
        switch self {
        case .nothing: break
        case .nap(let duration): sleep(for: duration)
        case .log: Log.log(.soak, soak.logs.offerUnordered())
        case .handOff: soak.handOff()
        }
    }
}
