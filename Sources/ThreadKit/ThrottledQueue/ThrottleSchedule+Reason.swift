/// Why the next start of a ``ThrottledQueue`` waits, as ``Diagnostics`` shows it.
enum StartHindrance: String, Equatable, Sendable {
    /// Nothing holds it: it starts as soon as a thread gets to it.
    case due
    /// The gap after the last start (or end, for `.serial`).
    case gap
    /// The rate limit: its window is full of starts.
    case window
    /// A pause (``ThrottledQueue/pause(for:)``).
    case pause
    /// The running task: the next one starts after its end.
    case end
    /// Another process's `.serial` task, whose lease the shared limit waits out.
    case lease
    /// The coordinator of a shared limit: its answer, or the start it reserved.
    case coordinator
}

extension CoordinatedStarts {
    /// What holds a start that the local rules allow at `localAllowed`, in a queue whose starts a
    /// coordinator decides: the reservation it gave (a `.serial` limit's lease held by another
    /// process, or a start reserved further on), or its answer, still awaited; `nil` when the
    /// coordinator holds nothing up (its fallback decides, or the start can go).
    func explainStart(localAllowed: MonotonicInstant, now: MonotonicInstant, monitor: ThrottledQueue.Monitor)
        -> (at: MonotonicInstant, hindrance: StartHindrance)? {
        let hindrance: StartHindrance = monitor == .serial ? .lease : .coordinator
        if let reservation, reservation.at > max(now, localAllowed) { return (reservation.at, hindrance) }
        if let askAfter, askAfter > max(now, localAllowed) { return (askAfter, hindrance) }
        if isAsking { return (max(now, localAllowed), .coordinator) }
        return nil
    }
}
