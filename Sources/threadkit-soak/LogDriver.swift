// Log: counting delegates, replaced now and then; sources switched on and off from one thread
// while every driver's thread and many pool, timer and queue tasks log.
//
// A record on the soak's source carries "<logger> <sequence>". Each driver thread is a logger of
// its own and numbers its records 1, 2, 3…; the delegates check that each logger's records arrive
// exactly once and in order. Tasks share logger 0, whose records are counted but not ordered.
import Synchronization
import ThreadKit
import ToolHarness

extension Log.Source {
    /// The soak's own source.
    static let soak = Log.Source("Soak")
}

/// Numbers the records one thread logs.
struct LogSequence {
    let logger: Int
    private var sequence = 0

    init(logger: Int) {
        precondition(logger >= 1, "logger 0 is the tasks' shared, unordered logger")
        self.logger = logger
    }

    /// The next message, counted as offered. Call it only inside `Log.log`'s message argument,
    /// which is evaluated only while the source is enabled: a message built is a record accepted.
    mutating func next(_ ledger: Ledger) -> String {
        sequence += 1
        ledger.offer()
        return "\(logger) \(sequence)"
    }
}

extension Ledger {
    /// A message of the tasks' shared logger 0, counted as offered; as ``LogSequence/next(_:)``,
    /// only inside `Log.log`'s message argument.
    func offerUnordered() -> String {
        offer()
        return "0 0"
    }
}

/// Receives what every counting delegate is given, and checks it.
///
/// Counts each soak record as ran in the log ledger, checks each logger's sequence, checks that no
/// two threads deliver at once, and counts the records of ThreadKit's own sources.
final class LogBook: Sendable {
    private let ledger: Ledger
    private let lastSequence = Mutex<[Int: Int]>([:])
    private let delivering = Atomic<Bool>(false)
    private let componentRecords = Atomic<Int>(0)

    init(ledger: Ledger) {
        self.ledger = ledger
    }

    /// Records of ThreadKit's own sources (pool threads made and collected, pauses…) delivered.
    var componentRecordCount: Int { componentRecords.load(ordering: .relaxed) }

    func receive(_ record: Log.Record) {
        if delivering.exchange(true, ordering: .acquiring) {
            violations.report("log: the delegate was called by two threads at once")
        }
        defer { delivering.store(false, ordering: .releasing) }
        guard record.source == .soak else {
            componentRecords.wrappingAdd(1, ordering: .relaxed)
            return
        }
        ledger.record(.ran)
        let fields = record.message.split(separator: " ")
        guard fields.count == 2, let logger = Int(fields[0]), let sequence = Int(fields[1]) else {
            violations.report("log: a record with a message the soak did not write: '\(record.message)'")
            return
        }
        guard logger != 0 else { return }
        let previous = lastSequence.withLock { last in
            defer { last[logger] = sequence }
            return last[logger] ?? 0
        }
        if sequence != previous + 1 {
            violations.report("log: logger \(logger)'s record \(sequence) arrived after its record \(previous): lost, repeated or out of order")
        }
    }
}

/// A delegate that hands every record to the ``LogBook``; the log driver installs new ones as it goes.
final class CountingLogDelegate: LogDelegate {
    private let book: LogBook

    init(book: LogBook) {
        self.book = book
    }

    func log(_ record: Log.Record) {
        book.receive(record)
    }
}

/// Logs numbered records in bursts while it switches sources on and off, ThreadKit's own
/// included, and now and then replaces the delegate.
struct LogDriver: Driver {
    let name: String

    private enum Operation {
        case burst, toggleSoak, toggleComponent, switchAll, replaceDelegate, rest
    }

    /// ThreadKit's own sources it switches.
    func setUp(_ run: inout DriverRun) -> [Log.Source] {
        run.doing("logging, switching sources and delegates")
        return [.threadPool, .timer, .throttle]
    }

    func step(_ components: inout [Log.Source], _ run: inout DriverRun) {
        let operation = run.random.weighted([
            Operation.burst: 500, .toggleSoak: 100, .toggleComponent: 60, .switchAll: 2, .replaceDelegate: 5, .rest: 333,
        ])
        switch operation {
        case .burst:
            for _ in 0..<Int.random(in: 1...32, using: &run.random) { run.logNext() }
        case .toggleSoak:
            toggle(.soak)
        case .toggleComponent:
            toggle(components.randomElement(using: &run.random)!)
        case .switchAll:
            if run.random.chance(0.5) { Log.enableAll() } else { Log.disableAll() }
            tally.add("log: enableAll or disableAll")
        case .replaceDelegate:
            run.soak.installLogDelegate()
        case .rest:
            sleep(for: run.random.microseconds(100...1_000))
        }
    }

    /// Nothing to quiesce: the soak delivers the last records once every driver has finished.
    func quiesce(_ components: inout [Log.Source], _ run: inout DriverRun) {}

    private func toggle(_ source: Log.Source) {
        if Log.isEnabled(source) { Log.disable(source) } else { Log.enable(source) }
    }
}
