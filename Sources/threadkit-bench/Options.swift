// The command line.
import ToolHarness

/// What the command line asks for.
struct Options: CommandLineOptions {
    var isQuick = false
    /// Measured rounds per workload, when not the default (15, or 3 with `--quick`).
    var rounds: Int?
    /// In a child process: the one workload to run, for the one `implementations` entry.
    var child: String?
    /// In a child process: which round this is (for its log lines).
    var round = 0
    var runsSelfTest = false
    var listsWorkloads = false
    /// Run only the workloads whose id starts with one of these.
    var only: [String] = []
    /// Run only these implementations (all when empty): for profiling one of them.
    var implementations: [String] = []
    var jsonPath: String?
    var markdownPath: String?
    var svgDirectory: String?
    var writesDocsByDefault = true

    static let usage = """
        usage: threadkit-bench [--quick] [--rounds N] [--only PREFIX]... [--implementation NAME]... [--json PATH] [--markdown PATH] [--svg-dir DIR] [--no-docs]
               threadkit-bench --self-test | --list

          --quick          every workload at a tenth of its size, 3 rounds (for CI; asserts no speed, exits 0)
          --rounds N       measured rounds per workload (default 15; 3 with --quick)
          --only PREFIX    run only workloads whose id starts with PREFIX (repeatable, or comma-separated),
                           e.g. --only pool. or --only timer.fire,log.
          --implementation NAME
                           run only this implementation (repeatable), e.g. ThreadKit, to profile it
                           alone; ratios to peers that did not run are left out
          --json PATH      write {"machine", "rows", …} to PATH
          --markdown PATH  write the results section (table and charts) into PATH, between its markers
          --svg-dir DIR    write the charts to DIR (default: the markdown file's directory)
          --no-docs        a full run from the package root writes Docs/benchmarks.md and Docs/*.svg
                           unless this is given
          --self-test      check the statistics (percentiles, bootstrap, verdicts) and exit
          --list           print the workload ids and exit

        Every round of every implementation runs in a fresh process: the benchmark runs itself with
        --child WORKLOAD --implementation NAME [--quick], which prints one measurement as JSON on a
        line that starts with "threadkit-bench measurement: ".
        """

    static func parse(_ arguments: inout Arguments) throws(UsageError) -> Options {
        var options = Options()
        while let argument = arguments.next() {
            switch argument {
            case "--quick": options.isQuick = true
            case "--rounds": options.rounds = try arguments.number(after: argument)
            case "--child": options.child = try arguments.value(after: argument)
            case "--round": options.round = try arguments.number(after: argument, atLeast: 0)
            case "--self-test": options.runsSelfTest = true
            case "--list": options.listsWorkloads = true
            case "--only": options.only += try arguments.value(after: argument).split(separator: ",").map(String.init)
            case "--implementation": options.implementations.append(try arguments.value(after: argument))
            case "--json": options.jsonPath = try arguments.value(after: argument)
            case "--markdown": options.markdownPath = try arguments.value(after: argument)
            case "--svg-dir": options.svgDirectory = try arguments.value(after: argument)
            case "--no-docs": options.writesDocsByDefault = false
            default: throw UsageError.unknown(argument)
            }
        }
        return options
    }

    /// The command line with only the options that change what is measured (not where it is written).
    var measuringCommand: String {
        var words = ["threadkit-bench"]
        if isQuick { words.append("--quick") }
        if let rounds { words += ["--rounds", String(rounds)] }
        words += only.flatMap { ["--only", $0] }
        words += implementations.flatMap { ["--implementation", "'\($0)'"] }
        return words.joined(separator: " ")
    }

    func selects(_ id: String) -> Bool {
        only.isEmpty || only.contains { id.hasPrefix($0) }
    }

    func selects(implementation name: String) -> Bool {
        implementations.isEmpty || implementations.contains(name)
    }
}
