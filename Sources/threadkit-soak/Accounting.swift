// Exact accounting: every unit of work a part accepted, and how each one ended.
import Foundation
import Synchronization

/// How a unit of work ended, or that it was never accepted.
enum Outcome: UInt8, Sendable, CustomStringConvertible {
    /// Accepted, not ended yet: queued, waiting for its deadline, or running.
    case pending
    /// Its closure ran (for a `run`, its work ran; for a log record, it reached the delegate).
    case ran
    /// The component gave it back unrun: in the list `ThreadPool.disposeNow()` returned, or a pool's
    /// `run` threw `ThreadPoolError.disposed` before its work started.
    case handedBack
    /// It will never run because the soak stopped it: `cancel()` returned `true`, `cancelAll` or a
    /// timer's `dispose()` counted it, or `run` threw `CancellationError` before its work started.
    case cancelled
    /// The submission threw: the component never accepted it.
    case refused

    var description: String {
        switch self {
        case .pending: "pending"
        case .ran: "ran"
        case .handedBack: "handed back"
        case .cancelled: "cancelled"
        case .refused: "refused"
        }
    }
}

/// What a ``Ledger`` counts. Every counter only grows.
enum Counter: Int, CaseIterable {
    /// Offered submissions that threw instead of accepting the work.
    case refused
    /// Accepted units that ended so: see ``Outcome``.
    case ran, handedBack, cancelled
    /// Runs of repeating timer calls, any number per call: information, not part of the balance.
    case repeatRuns
    /// Units that ended a second time (ran twice, ran after `cancel()` returned `true`, refused
    /// after it ran…): each one is also reported as a violation.
    case endedTwice
    /// Submissions made: `execute`, `schedule`, `run`, `async`, `sync`, or a log message built.
    /// Last, so that a snapshot read in this order never shows a unit ending that it does not show
    /// offered: outstanding is never negative unless a unit ended twice.
    case offered

    /// The counter of units that ended as `outcome` (or, for `.refused`, were never accepted).
    init(_ outcome: Outcome) {
        switch outcome {
        case .pending: preconditionFailure("a unit cannot end as pending")
        case .ran: self = .ran
        case .handedBack: self = .handedBack
        case .cancelled: self = .cancelled
        case .refused: self = .refused
        }
    }
}

/// The counts of a ``Ledger`` at one moment.
struct Counts: Sendable {
    private var values = [Int](repeating: 0, count: Counter.allCases.count)

    subscript(counter: Counter) -> Int {
        get { values[counter.rawValue] }
        set { values[counter.rawValue] = newValue }
    }

    /// Units the component accepted: submissions that did not throw.
    var accepted: Int { self[.offered] - self[.refused] }
    /// Accepted units that have not ended. Fine while the soak runs; once it is quiesced, a positive
    /// number is a lost unit and a negative one a unit counted as ended twice.
    var outstanding: Int { accepted - self[.ran] - self[.handedBack] - self[.cancelled] }

    /// "acc 1234 ran 1200 back 10 cxl 20 out 4", as the report lines show it.
    var line: String {
        "acc \(accepted) ran \(self[.ran]) back \(self[.handedBack]) cxl \(self[.cancelled]) out \(outstanding)"
    }
}

/// Exact counts of one part's work, or of one pool, timer or queue, whose counts also add to its
/// part's ledger (its `parent`).
///
/// A submission is counted as offered *before* it is made and as refused if it throws, so
/// accepted = offered − refused: a unit that runs before its submission returns is never seen
/// ending before it was accepted. A unit ends exactly once, as ran, handed back or cancelled;
/// ``Counts/outstanding`` is what remains.
final class Ledger: Sendable {
    let name: String
    let parent: Ledger?
    private let counters: InlineArray<7, Atomic<Int>> = InlineArray { _ in Atomic(0) }

    init(_ name: String, parent: Ledger? = nil) {
        precondition(Counter.allCases.count == 7, "a ledger has one atomic per counter")
        self.name = name
        self.parent = parent
    }

    /// Adds `count` to `counter`, here and in every parent.
    func add(_ counter: Counter, _ count: Int = 1) {
        guard count > 0 else { return }
        counters[counter.rawValue].wrappingAdd(count, ordering: .relaxed)
        parent?.add(counter, count)
    }

    /// Counts a submission about to be made.
    func offer() {
        add(.offered)
    }

    /// Counts `count` units that ended (or, for `.refused`, were never accepted) as `outcome`.
    func record(_ outcome: Outcome, count: Int = 1) {
        add(Counter(outcome), count)
    }

    /// The counts now, read in ``Counter``'s order: offers last.
    var counts: Counts {
        var counts = Counts()
        for counter in Counter.allCases {
            counts[counter] = counters[counter.rawValue].load(ordering: .acquiring)
        }
        return counts
    }

    /// Whether every accepted unit has ended.
    var isSettled: Bool { counts.outstanding == 0 }

    /// Offers one unit through `submit`, which is handed a closure that ends the unit as ran and
    /// then does `chore`. A throw ends the unit as refused and goes to `refused`.
    ///
    /// - Returns: What `submit` returned, with the unit; `nil` when it threw.
    @discardableResult
    func submit<Handle>(
        _ chore: Chore, in soak: Soak, through submit: (@escaping @Sendable () -> Void) throws -> Handle,
        refused: (any Error) -> Void
    ) -> (handle: Handle, unit: Unit)? {
        let unit = Unit(self)
        do {
            let handle = try submit {
                unit.end(.ran)
                chore.perform(in: soak)
            }
            return (handle, unit)
        } catch {
            unit.end(.refused)
            refused(error)
            return nil
        }
    }
}

/// One submission, captured by its closure, so that its end is counted once and a second end is
/// caught: `ran` after `cancel()` returned `true`, two runs, a refusal after the work ran.
final class Unit: Sendable {
    private let ledger: Ledger
    private let outcome = Atomic<UInt8>(Outcome.pending.rawValue)
    /// Runs of a repeating call that began after it was cancelled.
    private let lateRuns = Atomic<Int>(0)

    /// Makes the unit for a submission about to be made, counting it as offered.
    init(_ ledger: Ledger) {
        self.ledger = ledger
        ledger.offer()
    }

    /// Ends the unit as `outcome`, once.
    ///
    /// - Parameter alreadyCounted: The end was counted in bulk already (a `cancelAll` that
    ///   returned how many it removed): only mark the unit, so a second end is still caught.
    func end(_ outcome: Outcome, alreadyCounted: Bool = false) {
        let (exchanged, previous) = self.outcome.compareExchange(
            expected: Outcome.pending.rawValue, desired: outcome.rawValue, ordering: .acquiringAndReleasing)
        guard exchanged else {
            ledger.add(.endedTwice)
            let before = Outcome(rawValue: previous).map(String.init(describing:)) ?? "?"
            violations.report("\(ledger.name): a unit ended as \(outcome) after it had ended as \(before)")
            return
        }
        if !alreadyCounted { ledger.record(outcome) }
    }

    /// Counts one run of a repeating timer call.
    ///
    /// One run may begin just before a `cancel()` that returns `true` (the call is then cancelled
    /// mid-run); a second run after the cancel is a violation.
    func recordRepeatRun() {
        ledger.add(.repeatRuns)
        guard outcome.load(ordering: .acquiring) != Outcome.pending.rawValue else { return }
        if lateRuns.add(1, ordering: .relaxed).newValue == 2 {
            ledger.add(.endedTwice)
            violations.report("\(ledger.name): a repeating call ran twice after cancel() returned true")
        }
    }
}

/// Everything that makes the soak fail, as it is found.
final class Violations: Sendable {
    private static let keptMessages = 50
    private let messages = Mutex<[String]>([])
    private let total = Atomic<Int>(0)

    /// Records a violation and prints it at once (the first ones), so a long run shows it when it happens.
    func report(_ message: String) {
        let number = total.add(1, ordering: .relaxed).newValue
        guard number <= Self.keptMessages else { return }
        messages.withLock { $0.append(message) }
        printLine("VIOLATION: \(message)")
    }

    var count: Int { total.load(ordering: .relaxed) }

    /// The first violations, in the order found.
    var first: [String] { messages.withLock { $0 } }
}

/// The soak's violations.
let violations = Violations()

/// Counts of things that are neither units nor violations: pools made, refusals by reason, log
/// records of ThreadKit's own sources. Bumped at a coarse grain (per pool, per burst), so one lock is fine.
final class Tally: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    func add(_ key: String, _ count: Int = 1) {
        counts.withLock { $0[key, default: 0] += count }
    }

    var all: [(key: String, count: Int)] {
        counts.withLock { $0 }.sorted { $0.key < $1.key }.map { (key: $0.key, count: $0.value) }
    }
}

/// The soak's tally.
let tally = Tally()

/// An error's type and case, without its payload (which names a pool or a timer): a tally key
/// that stays the same from one pool to the next. "ThreadPoolError.threadStartFailed".
func reason(_ error: any Error) -> String {
    let mirror = Mirror(reflecting: error)
    guard mirror.displayStyle == .enum else { return "\(type(of: error))" }
    return "\(type(of: error)).\(mirror.children.first?.label ?? String(describing: error))"
}

/// Prints `line` to standard output at once, even when it is a pipe.
func printLine(_ line: String) {
    print(line)
    fflush(nil)  // every stream: standard output included, without naming the C global
}
