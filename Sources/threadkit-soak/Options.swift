// The command line.
import ToolHarness

struct Options: CommandLineOptions, Sendable {
    /// How long the drivers run before the final quiesce.
    var duration = Duration.seconds(600)
    /// How often a report line is printed (and the resident memory checked).
    var reportEvery = Duration.seconds(60)
    /// Seeds every driver's random choices; printed at the start of each run.
    var seed = UInt64.random(in: 1...UInt64(UInt32.max))

    static let usage = """
        usage: threadkit-soak [--minutes N | --seconds N] [--report-every SECONDS] [--seed N]

          --minutes N             run the drivers for N minutes (default 10), then quiesce and check
          --seconds N             the same in seconds, for quick local tries
          --report-every SECONDS  print a report line this often (default 60)
          --seed N                seed the drivers' random choices (default: random, printed)

        Exits 0 when every accepted task ran, was handed back or was cancelled exactly once and
        resident memory stayed within 10 % of its size at the first report; 1 otherwise, or on a hang.
        """

    static func parse(_ arguments: inout Arguments) throws(UsageError) -> Options {
        var options = Options()
        var durationGiven = false
        func setDuration(_ duration: Duration) throws(UsageError) {
            guard !durationGiven else { throw UsageError("give the length once: --minutes or --seconds") }
            durationGiven = true
            options.duration = duration
        }
        while let argument = arguments.next() {
            switch argument {
            case "--minutes": try setDuration(.seconds(60 * arguments.number(after: argument)))
            case "--seconds": try setDuration(.seconds(arguments.number(after: argument)))
            case "--report-every": options.reportEvery = .seconds(try arguments.number(after: argument))
            case "--seed": options.seed = UInt64(try arguments.number(after: argument))
            default: throw UsageError.unknown(argument)
            }
        }
        return options
    }
}
