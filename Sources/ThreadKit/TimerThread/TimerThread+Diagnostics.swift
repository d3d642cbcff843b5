/// What one hold of a timer's mutex copies out for its entry in a snapshot (see
/// ``TimerCore/diagnosticsReading(next:)``); formatted after the lock is let go.
struct TimerReading {
    /// One of the next calls due.
    struct Call {
        var deadline: MonotonicInstant
        /// The call's tag, if it has one; shown only as a string, a number or its type's name.
        var tag: AnyHashable?
        /// A repeating call's interval.
        var interval: Duration?
    }

    var pending: Int
    var next: [Call]
    var metrics: TimerMetrics
    var activity: ThreadActivity?
}

extension TimerCore: DiagnosticsReporting {
    /// How many of the next calls due a snapshot lists.
    static let callsShown = 5

    /// The timer's entry: whether it is the shared one, its counts and lateness histogram, the next
    /// calls due with their tags, and its thread (once it has started).
    package func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
        let reading = diagnosticsReading(next: Self.callsShown)
        let metrics = reading.metrics
        return Snapshot.Component(
            kind: "TimerThread", name: name, configuration: [Snapshot.Field("shared", String(isShared))],
            metrics: [
                Snapshot.Metric("calls_pending", .gauge, Double(reading.pending), help: "Calls that will run (again)."),
                Snapshot.Metric(
                    "calls_scheduled_total", .counter, Double(metrics.scheduled),
                    help: "Calls scheduled (a repeating call once)."),
                Snapshot.Metric(
                    "calls_fired_total", .counter, Double(metrics.fired),
                    help: "Runs of calls (each run of a repeating call)."),
                Snapshot.Metric(
                    "calls_cancelled_total", .counter, Double(metrics.cancelled),
                    help: "Calls stopped before they ran (again): cancelled, or dropped by dispose or release."),
                Snapshot.Metric(
                    histogram: "lateness_seconds", sum: metrics.latenessSum, buckets: metrics.latenessBuckets,
                    help: "How late each run started after its deadline."),
            ],
            threads: reading.activity.map { [clock.thread($0)] } ?? [],
            pending: reading.next.map { call in
                Snapshot.Pending(
                    what: Self.shown(call.tag), dueIn: clock.seconds(until: call.deadline),
                    reason: call.interval.map { "repeating every \(DiagnosticsClock.text($0))" } ?? "due")
            },
            pendingCount: reading.pending)
    }

    /// A tag as a dump shows it, without calling its code: a string quoted, a number as written,
    /// anything else by its type's name; `untagged` without one.
    static func shown(_ tag: AnyHashable?) -> String {
        guard let tag else { return "untagged" }
        let value = tag.base
        let type = type(of: value)
        if type == String.self || type == Substring.self { return "\"\(value)\"" }
        // The standard library's own description of its numbers: no user code.
        if numberTypes.contains(ObjectIdentifier(type)) { return String(describing: value) }
        return _typeName(type, qualified: false)
    }

    /// The standard integer and floating-point types, which a dump shows as numbers.
    private static let numberTypes: Set<ObjectIdentifier> = Set([
        Int.self, Int8.self, Int16.self, Int32.self, Int64.self, UInt.self, UInt8.self, UInt16.self, UInt32.self,
        UInt64.self, Double.self, Float.self,
    ].map { ObjectIdentifier($0 as Any.Type) })
}
