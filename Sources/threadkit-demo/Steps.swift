// How the tour talks: each step says what it shows before it runs, its lines reach the reader as
// they happen, and each step ends with the time it took, so the tour's length is measured, not claimed.
import Foundation
import Synchronization

/// Writes one line to standard output at once.
///
/// `print` alone leaves a line in the C library's buffer until the process exits when standard
/// output is a pipe (CI's log, `| tee`), so a reader would see the whole tour at the end.
func say(_ line: String = "") {
    print(line)
    fflush(nil)  // every stream, standard output included, without naming the C global
}

/// The step that is running: its title and when it began.
private let currentStep = Mutex<(title: String, start: ContinuousClock.Instant)?>(nil)

/// Ends the running step (saying how long it took) and starts the next: its heading, then what it shows.
func step(_ title: String, shows: String) {
    finishStep()
    currentStep.withLock { $0 = (title, .now) }
    say()
    say("== \(title) " + String(repeating: "=", count: max(0, 66 - title.count)))
    say("  shows: \(shows)")
}

/// Ends the running step, if any, with the time it took.
func finishStep() {
    guard let running = currentStep.withLock({ step in defer { step = nil }; return step }) else { return }
    say("  (this step took \(milliseconds(ContinuousClock.now - running.start)))")
}

/// A duration as milliseconds with one decimal, e.g. "12.3 ms".
func milliseconds(_ duration: Duration) -> String {
    String(format: "%.1f ms", duration.seconds * 1e3)
}

/// Milliseconds since `start`, rounded, e.g. "  400".
func offset(_ instant: ContinuousClock.Instant, from start: ContinuousClock.Instant) -> String {
    String(format: "%5.0f", (instant - start).seconds * 1e3)
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
