// The command line of the benchmark and the soak: one parse loop shape, one error, one exit.
import Foundation

/// A command line a tool does not understand, or a request for its usage (an empty description).
public struct UsageError: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }

    /// `--help` or `-h`: print the usage and exit 0.
    public var asksForUsage: Bool { description.isEmpty }

    /// The error for an argument no option of the tool takes; `--help` and `-h` ask for the usage.
    public static func unknown(_ argument: String) -> UsageError {
        argument == "--help" || argument == "-h" ? UsageError("") : UsageError("unknown argument '\(argument)'")
    }
}

/// The arguments a tool has not read yet, front first.
public struct Arguments {
    private var remaining: ArraySlice<String>

    public init(_ arguments: ArraySlice<String>) {
        remaining = arguments
    }

    /// The next argument, removed; `nil` once all are read.
    public mutating func next() -> String? {
        remaining.popFirst()
    }

    /// The value that follows `flag`, removed.
    ///
    /// - Throws: ``UsageError`` when no argument follows.
    public mutating func value(after flag: String) throws(UsageError) -> String {
        guard let value = remaining.popFirst() else { throw UsageError("\(flag) needs a value") }
        return value
    }

    /// The whole number that follows `flag`, removed.
    ///
    /// - Throws: ``UsageError`` when no argument follows, or it is not a whole number of at least `minimum`.
    public mutating func number(after flag: String, atLeast minimum: Int = 1) throws(UsageError) -> Int {
        let text = try value(after: flag)
        guard let value = Int(text), value >= minimum else {
            throw UsageError("\(flag) needs a whole number of at least \(minimum), got '\(text)'")
        }
        return value
    }
}

/// A tool's options, read from its command line.
public protocol CommandLineOptions {
    /// What `--help` prints, and what follows a usage error.
    static var usage: String { get }

    /// Reads every argument.
    ///
    /// - Throws: ``UsageError`` for an argument it does not take (``UsageError/unknown(_:)``) or a bad value.
    static func parse(_ arguments: inout Arguments) throws(UsageError) -> Self
}

extension CommandLineOptions {
    /// The options of this process's command line. On `--help` prints the usage and exits 0; on a
    /// usage error hands its description to `report`, prints the usage and exits 2.
    public static func parseOrExit(report: (String) -> Void) -> Self {
        var arguments = Arguments(CommandLine.arguments.dropFirst())
        do {
            return try parse(&arguments)
        } catch {
            if !error.asksForUsage { report(error.description) }
            print(usage)
            exit(error.asksForUsage ? 0 : 2)
        }
    }
}
