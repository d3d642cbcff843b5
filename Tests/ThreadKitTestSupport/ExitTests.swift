import Foundation
import Testing

/// What an exit test's child process wrote to standard error, as text (`nil` if the exit test
/// did not run, or its expectation failed).
public func standardError(of result: ExitTest.Result?) -> String? {
    result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }
}

/// Whether an exit test's child stopped with a message on standard error that contains every one
/// of `fragments` (a precondition's message names the argument and the value).
public func stopped(_ result: ExitTest.Result?, saying fragments: String...) -> Bool {
    stopped(result, saying: fragments)
}

/// Whether an exit test's child stopped with a message on standard error that contains every one
/// of `fragments` (none: whether it stopped at all, as the exit test expected).
public func stopped(_ result: ExitTest.Result?, saying fragments: [String]) -> Bool {
    guard let message = standardError(of: result) else { return false }
    return fragments.allSatisfy { message.contains($0) }
}

/// Expects, in debug builds where precondition messages are kept, that an exit test's child wrote
/// each of `expected` to standard error.
public func expectMessage(_ result: ExitTest.Result?, contains expected: [String], sourceLocation: SourceLocation = #_sourceLocation) {
    #if DEBUG
    guard let output = standardError(of: result) else { return }
    for part in expected {
        #expect(output.contains(part), "standard error was: \(output)", sourceLocation: sourceLocation)
    }
    #endif
}
