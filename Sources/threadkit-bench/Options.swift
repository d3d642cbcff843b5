// The command line.

struct Options {
    var isQuick = false
    /// Run only the workloads whose id starts with one of these.
    var only: [String] = []
    /// Run only these implementations (all when empty): for profiling one of them.
    var implementations: [String] = []
    var jsonPath: String?
    var markdownPath: String?
    var svgDirectory: String?
    var writesDocsByDefault = true

    static let usage = """
        usage: threadkit-bench [--quick] [--only PREFIX]... [--implementation NAME]... [--json PATH] [--markdown PATH] [--svg-dir DIR] [--no-docs]

          --quick          every workload at a tenth of its size (for CI; asserts no speed, exits 0)
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

        Workloads: pool.throughput.p1, pool.throughput.p2, pool.schedule.p1, pool.wake, timer.fire,
        timer.pending, throttle.precision, log.disabled, dedicated.throughput, dedicated.sync,
        dispatch.sync.held.
        """

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    static func parse(_ arguments: ArraySlice<String>) throws(UsageError) -> Options {
        var options = Options()
        var remaining = arguments
        func value(for flag: String) throws(UsageError) -> String {
            guard let value = remaining.popFirst() else { throw UsageError(description: "\(flag) needs a value") }
            return value
        }
        while let argument = remaining.popFirst() {
            switch argument {
            case "--quick": options.isQuick = true
            case "--only": options.only += try value(for: argument).split(separator: ",").map(String.init)
            case "--implementation": options.implementations.append(try value(for: argument))
            case "--json": options.jsonPath = try value(for: argument)
            case "--markdown": options.markdownPath = try value(for: argument)
            case "--svg-dir": options.svgDirectory = try value(for: argument)
            case "--no-docs": options.writesDocsByDefault = false
            case "--help", "-h": throw UsageError(description: "")
            default: throw UsageError(description: "unknown argument '\(argument)'")
            }
        }
        return options
    }

    /// The command line with only the options that change what is measured (not where it is written).
    var measuringCommand: String {
        var words = ["threadkit-bench"]
        if isQuick { words.append("--quick") }
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
