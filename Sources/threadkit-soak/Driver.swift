// What every driver is, and what the tasks they submit do when they run.
import ThreadKit
import SeededRandom

/// Drives one part of ThreadKit from its own thread until the soak stops, then quiesces and checks
/// everything it made.
protocol Driver: Sendable {
    /// Names the driver's thread and its lines in a hang report.
    var name: String { get }

    /// Drives until `soak.isStopping`; then disposes, waits for and checks what it made, and
    /// calls `heartbeat.finish()`. Beats `heartbeat` at every step.
    func drive(_ soak: Soak, _ heartbeat: Heartbeat)
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
        case 0..<10: .nap(.nanoseconds(Int64.random(in: 0...longestNap.nanoseconds, using: &random)))
        case 10..<15: .log
        default: .nothing
        }
    }

    func perform(in soak: Soak) {
        switch self {
        case .nothing: break
        case .nap(let duration): sleep(duration)
        case .log: Log.log(.soak, soak.logs.offerUnordered())
        case .handOff: soak.handOff()
        }
    }
}

extension Duration {
    /// The whole nanoseconds, for durations of seconds or less.
    var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}
