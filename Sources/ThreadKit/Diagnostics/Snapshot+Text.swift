import Foundation

extension Snapshot {
    /// The dump for people, laid out like the JVM's `jstack`: a header, the deadlocks found (the
    /// cycles of the wait-for graph), the long waits, then one block per component, its threads
    /// in aligned columns, and the threads of no component in ThreadKit's waits or labelled work.
    public var description: String {
        var lines = ["ThreadKit dump \(Self.timestamp(takenAt)), process \(processID)"]
        if !cycles.isEmpty {
            lines.append("")
            lines.append(cycles.count == 1 ? "Found one ThreadKit-level deadlock:" : "Found \(cycles.count) ThreadKit-level deadlocks:")
            for (index, cycle) in cycles.enumerated() {
                if index > 0 { lines.append("") }
                lines.append(String(repeating: "=", count: 40))
                lines += cycle.map { "  " + Self.line(for: $0) }
            }
        }
        let long = longWaits
        if !long.isEmpty {
            lines.append("")
            lines.append("Long waits (over \(Self.seconds(longWaitThreshold))):")
            lines += long.map { "  " + Self.line(for: $0) }
        }
        for component in components {
            lines.append("")
            lines += Self.lines(for: component)
        }
        if !otherThreads.isEmpty {
            lines.append("")
            lines.append("Other threads in ThreadKit's waits or labelled work:")
            lines += Self.threadLines(otherThreads)
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `"main" (tid 100) waits 3.214s in sync for DedicatedThread "db", held by "db" (tid 101)`.
    static func line(for wait: Wait) -> String {
        var text = "\(name(wait.thread)) waits \(seconds(wait.seconds)) in \(wait.kind) for \(wait.waitsFor)"
        if let holder = wait.holder { text += ", held by \(name(holder))" }
        return text
    }

    private static func lines(for component: Component) -> [String] {
        var head = "\(component.kind) \"\(component.name)\""
        if !component.configuration.isEmpty {
            head += ": " + component.configuration.map { "\($0.name)=\($0.value)" }.joined(separator: " ")
        }
        var lines = [head]
        let plain = component.metrics.filter { $0.kind != .histogram && $0.labels.isEmpty }
        if !plain.isEmpty {
            lines.append("  " + plain.map { "\($0.name)=\(PrometheusText.number($0.value))" }.joined(separator: " "))
        }
        if component.pendingCount > 0 || !component.pending.isEmpty {
            var text = "  pending \(component.pendingCount)"
            if !component.pending.isEmpty {
                text += "; next: " + component.pending.map(pendingText).joined(separator: ", ")
            }
            lines.append(text)
        }
        for endpoint in component.endpoints {
            var text = "  endpoint \(endpoint.endpoint): running \(endpoint.running), queued \(endpoint.queued)"
            if let paused = endpoint.pausedFor { text += ", paused for \(seconds(paused))" }
            lines.append(text)
        }
        lines += threadLines(component.threads)
        return lines
    }

    /// `"heartbeat" in 29.850s`, `the next task in 350.0ms (gap)`: the reason unless it is only "due".
    private static func pendingText(_ pending: Pending) -> String {
        let text = "\(pending.what) in \(seconds(pending.dueIn))"
        return pending.reason == "due" ? text : text + " (\(pending.reason))"
    }

    /// One aligned row per thread: name, kernel name, id, state, its time (column 4), what it does.
    static func threadLines(_ threads: [Thread]) -> [String] {
        let rows = threads.map { thread -> [String] in
            var what: [String] = []
            if let until = thread.until { what.append("until \(seconds(until)) from now") }
            if let work = thread.work { what.append(work) }
            if let waitsFor = thread.waitsFor { what.append("waiting for \(waitsFor)") }
            return [
                "\"\(thread.name)\"", "[\(thread.kernelName)]", "tid \(thread.kernelThreadID)",
                thread.state.rawValue, seconds(thread.seconds), what.joined(separator: ", "),
            ]
        }
        guard let columns = rows.first?.count else { return [] }
        let widths = (0..<columns).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            let padded = row.enumerated().map { column, cell in
                let room = String(repeating: " ", count: widths[column] - cell.count)
                // The time is right-aligned; the last column is not padded.
                return column == 4 ? room + cell : column == columns - 1 ? cell : cell + room
            }
            return ("  " + padded.joined(separator: "  ")).trimmingTrailingSpaces()
        }
    }

    private static func name(_ thread: ThreadReference) -> String {
        "\"\(thread.name)\" (tid \(thread.kernelThreadID))"
    }

    /// `3.214s`, `12.5ms`, `40µs`: three significant places at most.
    static func seconds(_ value: Double) -> String {
        let magnitude = value.magnitude
        let sign = value < 0 ? "-" : ""
        if magnitude >= 1 || magnitude == 0 { return sign + String(format: "%.3fs", magnitude) }
        if magnitude >= 1e-3 { return sign + String(format: "%.1fms", magnitude * 1e3) }
        return sign + String(format: "%.0fµs", magnitude * 1e6)
    }

    private static func timestamp(_ date: Date) -> String {
        var formatter = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        formatter.timeZone = TimeZone(identifier: "UTC")!
        return date.formatted(formatter)
    }
}

extension String {
    fileprivate func trimmingTrailingSpaces() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
