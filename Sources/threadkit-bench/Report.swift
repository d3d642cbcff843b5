// The results as rows, and the three ways they leave the program: a table on standard output,
// JSON, and the generated section of Docs/benchmarks.md.
import Foundation

/// One line of the results: a metric of one implementation in one workload, over the repetitions.
struct Row {
    let workload: String
    let implementation: String
    let metric: String
    let unit: String
    let summary: Summary
    let isCount: Bool

    static func rows(of result: WorkloadResult) -> [Row] {
        result.contenders.flatMap { contender in
            result.metrics.compactMap { metric in
                contender.values[metric.name].map { values in
                    Row(
                        workload: result.id, implementation: contender.name, metric: metric.name,
                        unit: metric.unit, summary: Summary(values), isCount: metric.isCount)
                }
            }
        }
    }

    /// "812 ns" or "0 early calls".
    func text(_ value: Double) -> String {
        let number = isCount ? String(Int(value.rounded())) : Format.plain(value)
        return unit == "count" ? number : "\(number) \(unit)"
    }
}

enum Format {
    /// A value with about three significant digits: 1234, 123, 12.3, 1.23, 0.123; whole numbers bare.
    static func plain(_ value: Double) -> String {
        let magnitude = abs(value)
        if value == value.rounded() || magnitude >= 100 { return String(format: "%.0f", value) }
        if magnitude >= 10 { return String(format: "%.1f", value) }
        if magnitude >= 1 { return String(format: "%.2f", value) }
        return String(format: "%.3g", value)
    }

    static func value(_ value: Double, _ metric: Metric) -> String {
        metric.isCount ? String(Int(value.rounded())) : plain(value)
    }

    /// A goal's factor as the specification writes it: 0.35, 0.5, 1.0.
    static func factor(_ factor: Double) -> String {
        if factor == factor.rounded() { return String(format: "%.1f", factor) }
        var text = String(format: "%.2f", factor)
        while text.hasSuffix("0") { text.removeLast() }
        return text
    }

    static func ratio(_ ratio: Double) -> String {
        ratio.isFinite ? String(format: "%.2f×", ratio) : "—"
    }
}

/// Everything a report needs.
struct Report {
    let machine: Machine
    let isQuick: Bool
    let scale: Scale
    let command: String
    let rows: [Row]
    /// Nanoseconds per `Countdown.tick()` with two threads ticking one counter flat out.
    let countingCost: Double?

    var verdicts: [(row: Row, verdict: Verdict)] {
        rows.compactMap { row in Verdict(for: row, among: rows).map { (row, $0) } }
    }

    // MARK: - Text table

    /// The table for standard output, one block per workload.
    func table() -> String {
        let header = ["workload", "implementation", "metric", "median [min .. max]", "ratio", "goal", ""]
        var lines: [[String]] = []
        var previous: String?
        for row in rows {
            if let previous, previous != row.workload { lines.append([]) }
            previous = row.workload
            let summary = row.summary
            let range = "\(row.text(summary.median)) [\(Format.plain(summary.min)) .. \(Format.plain(summary.max))]"
            var cells = [row.workload, row.implementation, row.metric, range, "", "", ""]
            if let verdict = Verdict(for: row, among: rows) {
                cells[4] = verdict.ratio.map(Format.ratio) ?? ""
                cells[5] = verdict.goal.text
                cells[6] = verdict.isMet ? "met" : "NOT met"
            }
            lines.append(cells)
        }
        var widths = header.map(\.count)
        for cells in lines where !cells.isEmpty {
            for (index, cell) in cells.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        func render(_ cells: [String]) -> String {
            zip(cells, widths).map { cell, width in cell.padding(toLength: width, withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }
        var text = render(header) + "\n" + String(repeating: "-", count: widths.reduce(0, +) + 2 * (widths.count - 1)) + "\n"
        for cells in lines { text += cells.isEmpty ? "\n" : render(cells) + "\n" }
        let verdicts = self.verdicts
        text += "\nThreadKit goals met: \(verdicts.count { $0.verdict.isMet }) of \(verdicts.count)"
        text += " (ratio = ThreadKit median / peer median in this run).\n"
        return text
    }

    // MARK: - JSON

    private struct JSONDocument: Encodable {
        struct JSONRow: Encodable {
            let workload, implementation, metric: String
            let median, min, max: Double
            let unit: String
        }
        struct JSONGoal: Encodable {
            let workload, metric, goal: String
            let ratio: Double?
            let met: Bool
        }
        let mode: String
        let machine: Machine
        let rows: [JSONRow]
        let goals: [JSONGoal]
        let countingCostNanoseconds: Double?
    }

    func json() throws -> Data {
        let document = JSONDocument(
            mode: isQuick ? "quick" : "full", machine: machine,
            rows: rows.map {
                .init(workload: $0.workload, implementation: $0.implementation, metric: $0.metric,
                      median: $0.summary.median, min: $0.summary.min, max: $0.summary.max, unit: $0.unit)
            },
            goals: verdicts.map {
                .init(workload: $0.row.workload, metric: $0.row.metric, goal: $0.verdict.goal.text,
                      ratio: $0.verdict.ratio, met: $0.verdict.isMet)
            },
            countingCostNanoseconds: countingCost)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(document)
    }

    // MARK: - Markdown

    static let beginMarker = "<!-- threadkit-bench results: begin. Generated by the benchmark; everything down to the end marker is replaced on each run. -->"
    static let endMarker = "<!-- threadkit-bench results: end -->"

    /// The generated results section, markers included. `charts` are (caption, relative path).
    func markdownSection(charts: [(caption: String, path: String)]) -> String {
        var text = Self.beginMarker + "\n\n"
        text += "Measured \(machine.date) on \(machine.cpu), \(machine.cores) cores, \(machine.memoryText), "
        text += "\(machine.kernel); Swift \(machine.swift), \(machine.build) build of revision `\(machine.revision)`; load average "
        text += "\(machine.loadAverageAtStart) at the start, \(machine.loadAverageAtEnd ?? "?") at the end. "
        text += "Command: `\(command)` (\(isQuick ? "quick mode, a tenth of the sizes" : "full size")). "
        text += "\(scale.repetitions) repetitions after \(scale.warmUps) warm-up; each figure is the median of the "
        text += "repetitions, with their minimum and maximum.\n\n"
        text += "| workload | implementation | metric | median | min – max | ratio | goal | |\n"
        text += "|---|---|---|--:|--:|--:|---|---|\n"
        for row in rows {
            let verdict = Verdict(for: row, among: rows)
            let summary = row.summary
            let cells = [
                "`\(row.workload)`", row.implementation, row.metric, row.text(summary.median),
                "\(Format.plain(summary.min)) – \(Format.plain(summary.max))",
                verdict?.ratio.map(Format.ratio) ?? "", verdict?.goal.text ?? "",
                verdict.map { $0.isMet ? "met" : "**NOT met**" } ?? "",
            ]
            let emphasised = row.implementation == "ThreadKit" ? cells.enumerated().map { $0 == 1 ? "**\($1)**" : $1 } : cells
            text += "| " + emphasised.joined(separator: " | ") + " |\n"
        }
        let verdicts = self.verdicts
        text += "\nThreadKit goals met: **\(verdicts.count { $0.verdict.isMet }) of \(verdicts.count)**. "
        text += "Ratio = ThreadKit's median / the named peer's median in the same run.\n"
        if let countingCost {
            text += "Completion counting, measured alone with two threads ticking one counter flat out: "
            text += "\(Format.plain(countingCost)) ns per tick (an upper bound for what it adds per item).\n"
        }
        for chart in charts {
            text += "\n![\(chart.caption)](\(chart.path))\n"
        }
        return text + "\n" + Self.endMarker + "\n"
    }

    /// Writes the results section into the markdown file at `path`, between the markers if the file
    /// has them, or as a new file otherwise.
    func writeMarkdown(to path: String, charts: [(caption: String, path: String)]) throws {
        let section = markdownSection(charts: charts)
        var document = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        if let begin = document.range(of: Self.beginMarker), let end = document.range(of: Self.endMarker),
           begin.lowerBound < end.upperBound {
            var replaceEnd = end.upperBound
            if replaceEnd < document.endIndex, document[replaceEnd] == "\n" { replaceEnd = document.index(after: replaceEnd) }
            document.replaceSubrange(begin.lowerBound..<replaceEnd, with: section)
        } else {
            document = "# ThreadKit benchmarks\n\n" + section
        }
        try document.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
