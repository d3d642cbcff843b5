// The Swift tasks a subject launched that have not finished, so it can wait for them before it
// checks its counts.
import Synchronization
import ToolHarness

/// Counts the Swift tasks a driver launched at one pool, queue or thread that have not finished,
/// so it can wait for them before it checks that subject's counts.
final class InFlight: Sendable {
    private let running = Atomic<Int>(0)

    var count: Int { running.load(ordering: .acquiring) }

    func enter() {
        running.wrappingAdd(1, ordering: .relaxed)
    }

    func leave() {
        running.wrappingSubtract(1, ordering: .releasing)
    }

    /// Unless `limit` tasks are in flight, offers a unit in `ledger` and runs `body` with it in a
    /// detached Swift task, counted here until it returns.
    ///
    /// - Returns: The task; `nil`, with no unit offered, when `limit` are in flight.
    @discardableResult
    func launch(limit: Int, unitIn ledger: Ledger, _ body: @escaping @Sendable (Unit) async -> Void) -> Task<Void, Never>? {
        guard count < limit else { return nil }
        let unit = Unit(ledger)
        enter()
        return Task.detached { [self] in
            defer { leave() }
            await body(unit)
        }
    }

    /// Waits up to 20 s until every task has left; `false`, with a violation naming `subject`, if
    /// some are still running then.
    func awaitNone(of subject: CustomStringConvertible) -> Bool {
        guard poll(timeout: .seconds(20), until: { count == 0 }) else {
            violations.report("\(subject): \(count) run calls did not return within 20 s")
            return false
        }
        return true
    }
}
