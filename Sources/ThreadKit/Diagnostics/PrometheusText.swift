/// The Prometheus text exposition format (version 0.0.4) of a snapshot: the pure rendering behind
/// ``Diagnostics/prometheusText()``.
///
/// Each component's metrics become families named `threadkit_<part>_<metric>`, where the part is
/// the component's kind (`pool`, `timer`, `queue`, `dedicated`, `url`, `redis`), with the component's
/// name in a label (`pool`, `thread`, `queue`, `dispatcher`, `client`). A family's samples from
/// every component sit together under one `# HELP` and one `# TYPE` line, as the format requires.
/// Two live components of one kind and name (two pools both called `"io"`) would give one series
/// twice: the second is labelled `"io #2"`, the third `"io #3"`.
enum PrometheusText {
    /// What each kind of component is called in metric names, and the label that carries its name.
    static func part(of kind: String) -> (part: String, label: String) {
        switch kind {
        case "ThreadPool": ("pool", "pool")
        case "TimerThread": ("timer", "thread")
        case "ThrottledQueue": ("queue", "queue")
        case "DedicatedThread": ("dedicated", "thread")
        case "URLDispatcher": ("url", "dispatcher")
        case "RedisClient": ("redis", "client")
        default: (metricName(kind.lowercased()), "name")
        }
    }

    static func render(_ snapshot: Snapshot) -> String {
        var families: [String: Family] = [:]
        var order: [String] = []
        func add(_ name: String, _ metric: Snapshot.Metric, labels: [Snapshot.Field]) {
            if families[name] == nil {
                families[name] = Family(kind: metric.kind, help: metric.help)
                order.append(name)
            }
            families[name]!.samples.append(Sample(labels: labels + metric.labels, metric: metric))
        }
        var seen: [String: Int] = [:]
        for component in snapshot.components {
            let (part, label) = part(of: component.kind)
            let key = "\(component.kind)\u{0}\(component.name)"
            seen[key, default: 0] += 1
            let name = seen[key]! == 1 ? component.name : "\(component.name) #\(seen[key]!)"
            for metric in component.metrics {
                add("threadkit_\(part)_\(metricName(metric.name))", metric, labels: [Snapshot.Field(label, name)])
            }
        }
        for metric in processMetrics(snapshot) {
            add("threadkit_\(metric.name)", metric, labels: [])
        }
        var text = ""
        for name in order {
            let family = families[name]!
            text += "# HELP \(name) \(escapeHelp(family.help))\n"
            text += "# TYPE \(name) \(family.kind.rawValue)\n"
            for sample in family.samples { text += lines(name, sample) }
        }
        return text
    }

    /// Process-wide families: the threads ThreadKit knows by state, the blocked waits, the cycles.
    private static func processMetrics(_ snapshot: Snapshot) -> [Snapshot.Metric] {
        // A thread listed by two components (a pool's, working for a throttled queue) counts once.
        var byState: [Snapshot.Thread.State: Int] = [:]
        var counted: Set<Int32> = []
        for thread in snapshot.components.flatMap(\.threads) + snapshot.otherThreads where counted.insert(thread.kernelThreadID).inserted {
            byState[thread.state, default: 0] += 1
        }
        let states: [Snapshot.Thread.State] = [.running, .spinning, .sleeping, .blocked]
        return states.map { state in
            Snapshot.Metric(
                "threads", .gauge, Double(byState[state] ?? 0),
                help: "Threads of ThreadKit's components, and other threads blocked in its waits, by state.",
                labels: [Snapshot.Field("state", state.rawValue)])
        } + [
            Snapshot.Metric("waits_blocked", .gauge, Double(snapshot.waits.count), help: "Threads blocked in one of ThreadKit's waits."),
            Snapshot.Metric(
                "waits_long", .gauge, Double(snapshot.longWaits.count),
                help: "Blocked waits longer than the snapshot's long-wait threshold."),
            Snapshot.Metric("deadlocks", .gauge, Double(snapshot.cycles.count), help: "Cycles in the wait-for graph: threads that wait for each other."),
        ]
    }

    private struct Family {
        let kind: Snapshot.Metric.Kind
        let help: String
        var samples: [Sample] = []
    }

    private struct Sample {
        let labels: [Snapshot.Field]
        let metric: Snapshot.Metric
    }

    private static func lines(_ name: String, _ sample: Sample) -> String {
        guard sample.metric.kind == .histogram else {
            return "\(name)\(labelText(sample.labels)) \(number(sample.metric.value))\n"
        }
        var text = ""
        for bucket in sample.metric.buckets {
            let bound = Snapshot.Field("le", bucket.upperBound == .infinity ? "+Inf" : number(bucket.upperBound))
            text += "\(name)_bucket\(labelText(sample.labels + [bound])) \(bucket.count)\n"
        }
        text += "\(name)_sum\(labelText(sample.labels)) \(number(sample.metric.value))\n"
        text += "\(name)_count\(labelText(sample.labels)) \(sample.metric.buckets.last?.count ?? 0)\n"
        return text
    }

    private static func labelText(_ labels: [Snapshot.Field]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\(metricName($0.name))=\"\(escapeLabel($0.value))\"" }.joined(separator: ",") + "}"
    }

    /// A sample value as the format writes it: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), value.magnitude < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    /// `name` with every character a metric or label name cannot hold replaced by `_`.
    static func metricName(_ name: String) -> String {
        var result = ""
        for (index, scalar) in name.unicodeScalars.enumerated() {
            let isLetter = ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || scalar == "_" || scalar == ":"
            let isDigit = ("0"..."9").contains(scalar)
            result.unicodeScalars.append(isLetter || (isDigit && index > 0) ? scalar : "_")
        }
        return result.isEmpty ? "_" : result
    }

    /// A label value with `\`, `"` and line feeds escaped.
    static func escapeLabel(_ value: String) -> String {
        escape(value, quote: true)
    }

    /// A `# HELP` text with `\` and line feeds escaped.
    static func escapeHelp(_ text: String) -> String {
        escape(text, quote: false)
    }

    // By Unicode scalar, not by character: a "\r\n" is one character that holds a line feed.
    private static func escape(_ text: String, quote: Bool) -> String {
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result.append(contentsOf: "\\\\".unicodeScalars)
            case "\n": result.append(contentsOf: "\\n".unicodeScalars)
            case "\"" where quote: result.append(contentsOf: "\\\"".unicodeScalars)
            default: result.append(scalar)
            }
        }
        return String(result)
    }
}
