// What a fleet's run must show on Redis's clock, checked on plain lists of microseconds: a pure
// type, tested with made-up times (FleetCheckTests) and applied to what the 8-process runs recorded.

/// The instants a fleet's run recorded, all on Redis's clock (`TIME`, integer microseconds), and what
/// they show.
///
/// - `reservations`: every start the shared throttle script recorded (its `RPUSH` to the limit's log,
///   seen through `MONITOR`): the instants the guarantee is defined on, exact to the microsecond.
/// - `runs`: every task as it ran, read by the task itself through a one-line script (`TIME`, then
///   `RPUSH`): `start` is its first action, so it reads at or after the real start; `end` its last,
///   at or before the real end. A measured run lies inside the real one.
package struct FleetCheck: CustomStringConvertible {
    /// One task as it ran: who ran it, and its measured start and end.
    package struct Run: Equatable, Sendable {
        package var member: Int
        package var task: Int
        package var start: Int64
        package var end: Int64

        package init(member: Int, task: Int, start: Int64, end: Int64) {
            (self.member, self.task, self.start, self.end) = (member, task, start, end)
        }
    }

    /// The closest two consecutive reservations came (`nil`: fewer than two).
    package let minimumGap: Int64?
    /// The most reservations in any window of `window` microseconds (`[t, t + window)`).
    package let maximumInWindow: Int
    /// Pairs of consecutive reservations closer than `gap`.
    package let closePairs: [(Int64, Int64)]
    /// Tasks whose measured start comes before the reservation of the same rank: a start earlier
    /// than its reservation (see ``init(reservations:runs:gap:window:serialGap:)``).
    package let startsBeforeReservation: Int
    /// For each task, its measured start less the latest reservation at or before it, in
    /// microseconds: how late it began at least (the reading's own delay in it), whether or not
    /// that reservation was its own; a reservation given up unused makes no start look later.
    package let startDelays: [Int64]
    /// For `.serial`: consecutive runs (by start) that overlap, or whose start follows the previous
    /// end by less than the gap, as measured.
    ///
    /// The check errs toward passing: a measured run lies inside the real one (its start is read
    /// after the real start, its end before the real end), so a measured end-to-start gap is larger
    /// than the real one by the two readings' delays, up to two round trips to Redis. A violation
    /// found is always a real one; a real gap short by less than those delays goes unseen. The
    /// check compares with the gap itself rather than with the gap plus two round trips: no bound
    /// on a round trip holds on a loaded machine, and a check that could fail a correct run would
    /// be worse than one that can miss a violation smaller than the readings' delays.
    package let serialViolations: [(Run, Run)]
    /// How many reservations and runs there were.
    package let reservationCount: Int
    package let runCount: Int
    /// Runs recorded twice (the same member and task).
    package let duplicateRuns: Int

    /// - Parameters:
    ///   - gap: The gap every start asked for, from the previous start (`.concurrent`).
    ///   - window: The limit's window, `nil` without a limit.
    ///   - serialGap: For `.serial`: the gap from the previous task's end, compared with the measured
    ///     runs as they are (see ``serialViolations``: this errs toward passing by up to two round trips).
    package init(reservations: [Int64], runs: [Run], gap: Int64, window: Int64?, serialGap: Int64? = nil) {
        let reserved = reservations.sorted()
        var close: [(Int64, Int64)] = []
        var minimum: Int64?
        for (earlier, later) in zip(reserved, reserved.dropFirst()) {
            minimum = min(minimum ?? later - earlier, later - earlier)
            if later - earlier < gap { close.append((earlier, later)) }
        }
        minimumGap = minimum
        closePairs = close
        var most = 0
        if let window {
            // The fullest window starts at a reservation: count those in [t, t + window) for each t.
            var last = 0
            for (first, instant) in reserved.enumerated() {
                while last < reserved.count, reserved[last] < instant + window { last += 1 }
                most = max(most, last - first)
            }
        }
        maximumInWindow = most
        // Every task starts at or after a reservation of its own (one each; a reservation given up
        // unused is one more): then the k-th start in time comes at or after the k-th reservation.
        let starts = runs.map(\.start).sorted()
        startsBeforeReservation = zip(starts, reserved).count { $0.0 < $0.1 } + max(starts.count - reserved.count, 0)
        var latest = 0
        startDelays = starts.compactMap { start in
            while latest < reserved.count, reserved[latest] <= start { latest += 1 }
            return latest == 0 ? nil : start - reserved[latest - 1]
        }
        var serial: [(Run, Run)] = []
        if let serialGap {
            let ordered = runs.sorted { $0.start < $1.start }
            for (earlier, later) in zip(ordered, ordered.dropFirst()) where later.start - earlier.end < serialGap {
                serial.append((earlier, later))
            }
        }
        serialViolations = serial
        reservationCount = reserved.count
        runCount = runs.count
        duplicateRuns = runs.count - Set(runs.map { [$0.member, $0.task] }).count
    }

    package var description: String {
        "\(reservationCount) reservations, \(runCount) runs (\(duplicateRuns) doubled); "
            + "minimum gap \(minimumGap.map(String.init) ?? "-") µs, "
            + "\(closePairs.count) close pairs \(closePairs.prefix(3)); at most \(maximumInWindow) in a window; "
            + "\(startsBeforeReservation) starts before their reservation; \(serialViolations.count) serial overlaps "
            + "\(serialViolations.prefix(2).map { "\($0.0) then \($0.1)" })"
    }

    /// The runs in the records `member task start|end time` (what ``fleetRecordScript`` appends),
    /// each start paired with its end; records of another shape, and starts with no end, are left
    /// out and counted in `unpaired`.
    package static func runs(from records: [String]) -> (runs: [Run], unpaired: Int) {
        var starts: [[Int]: Int64] = [:]
        var runs: [Run] = []
        var unpaired = 0
        for record in records {
            let words = record.split(separator: " ")
            guard words.count == 4, let member = Int(words[0]), let task = Int(words[1]), let time = Int64(words[3]) else {
                unpaired += 1
                continue
            }
            if words[2] == "start", starts[[member, task]] == nil {
                starts[[member, task]] = time
            } else if words[2] == "end", let start = starts.removeValue(forKey: [member, task]) {
                runs.append(Run(member: member, task: task, start: start, end: time))
            } else {
                unpaired += 1
            }
        }
        return (runs, unpaired + starts.count)
    }
}
