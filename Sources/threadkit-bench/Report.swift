// The results as rows, and the three ways they leave the program: a table on standard output,
// JSON, and the generated section of Docs/benchmarks.md.
import Foundation
import ToolHarness

/// One line of the results: a metric of one implementation in one workload, over the rounds.
struct Row {
    let workload: String
    let implementation: String
    let metric: String
    let unit: String
    /// The median of the rounds; for a percentile, that percentile of every round's samples pooled.
    let median: Double
    /// The metric in each round (for a percentile: each round's own).
    let rounds: [Double]
    let isCount: Bool
    /// ThreadKit's verdict, on ThreadKit's rows that have a goal.
    var verdict: Verdict?
    /// On ThreadKit's rows without a goal: ThreadKit / the workload's first peer, on paired rounds.
    var comparison: (peer: String, estimate: Double, interval: Interval)?
    /// This row's median over the floor's (the same metric of the matching `floor.*` workload).
    var timesFloor: Double?

    var min: Double { rounds.min() ?? median }
    var max: Double { rounds.max() ?? median }

    /// The rows of `result`: one per contender and metric, and ThreadKit's once per goal of the
    /// metric (a metric judged against several peers has a row for each).
    static func rows(of result: WorkloadResult) -> [Row] {
        result.contenders.flatMap { contender in
            result.metrics.flatMap { metric -> [Row] in
                let values = contender.values(metric.name)
                guard !values.isEmpty else { return [] }
                var median = Stats.median(values)
                if let percentile = metric.percentileOf {
                    let samples = contender.samples(percentile.samples)
                    if !samples.isEmpty { median = PooledSamples(samples).pooled.percentile(percentile.percent) }
                }
                var row = Row(
                    workload: result.id, implementation: contender.name, metric: metric.name,
                    unit: metric.unit, median: median, rounds: values, isCount: metric.isCount)
                guard contender.name == "ThreadKit" else { return [row] }
                let goals = Goal.forRow(workload: result.id, metric: metric.name)
                if goals.isEmpty {
                    if let peer = result.contenders.first(where: { $0.name != "ThreadKit" }),
                       let ratio = Verdict.ratio(metric, contender, to: peer) {
                        row.comparison = (peer.name, ratio.estimate, ratio.interval)
                    }
                    return [row]
                }
                let verdicts = goals.compactMap { Verdict($0, in: result) }
                if verdicts.isEmpty { return [row] }
                return verdicts.map { verdict in
                    var judged = row
                    judged.verdict = verdict
                    return judged
                }
            }
        }
    }

    /// Fills in `timesFloor` for the pool rows, from the floor rows among `rows`.
    static func addFloors(_ rows: inout [Row]) {
        let floors = Dictionary(
            rows.filter { $0.workload.hasPrefix("floor.") }.map { ("\($0.workload)/\($0.metric)", $0.median) },
            uniquingKeysWith: { first, _ in first })
        for index in rows.indices {
            guard let floor = FloorWorkloads.floor(for: rows[index].workload),
                  let value = floors["\(floor)/\(rows[index].metric)"], value > 0 else { continue }
            rows[index].timesFloor = rows[index].median / value
        }
    }

    /// "812 ns" or "0 early calls".
    func text(_ value: Double) -> String {
        let number = isCount ? String(Int(value.rounded())) : Format.plain(value)
        return unit == "count" ? number : "\(number) \(unit)"
    }

    /// The cells of ThreadKit's judgement, as both tables show them: ThreadKit/peer with its
    /// interval (against the goal's peer, or the first peer), the goal, and the verdict.
    func judgementCells(emphasis: Bool) -> [String] {
        if let verdict {
            return [Report.ratioText(verdict), verdict.goal.text, Report.outcomeText(verdict.outcome, emphasis: emphasis)]
        }
        return [comparison.map(Report.comparisonText) ?? "", "", ""]
    }
}

extension Row: Encodable {
    private enum CodingKeys: String, CodingKey {
        case workload, implementation, metric, median, min, max, unit, rounds, timesFloor
        case goal, peer, ratio, ratioLow, ratioHigh, verdict
    }

    /// The row in the JSON: its own figures, and the verdict on ThreadKit's rows with a goal (the
    /// ratio's peer is the goal's, or on a ThreadKit row without a goal, the first peer).
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        for (key, text) in [(CodingKeys.workload, workload), (.implementation, implementation), (.metric, metric), (.unit, unit)] {
            try container.encode(text, forKey: key)
        }
        for (key, value) in [(CodingKeys.median, median), (.min, min), (.max, max)] {
            try container.encode(value, forKey: key)
        }
        try container.encode(rounds, forKey: .rounds)
        try container.encodeIfPresent(timesFloor, forKey: .timesFloor)
        try container.encodeIfPresent(verdict?.goal.text, forKey: .goal)
        try container.encodeIfPresent(verdict?.goal.peer ?? comparison?.peer, forKey: .peer)
        try container.encodeIfPresent(verdict?.estimate ?? comparison?.estimate, forKey: .ratio)
        try container.encodeIfPresent(verdict?.interval?.low ?? comparison?.interval.low, forKey: .ratioLow)
        try container.encodeIfPresent(verdict?.interval?.high ?? comparison?.interval.high, forKey: .ratioHigh)
        try container.encodeIfPresent(verdict?.outcome, forKey: .verdict)
    }
}

/// How numbers are written in the table, the markdown and the charts.
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
    /// Seconds per workload, process starts included.
    let seconds: [(workload: String, seconds: Double)]
    /// Workloads left out because a child process failed or hung, with why.
    let failures: [String]

    var verdicts: [(row: Row, verdict: Verdict)] {
        rows.compactMap { row in row.verdict.map { (row, $0) } }
    }

    /// "0.61× [0.55, 0.70]".
    static func ratioText(_ verdict: Verdict) -> String {
        let value: (Double) -> String
        switch verdict.goal.kind {
        case .ratio: value = { Format.ratio($0) }
        case .atMost, .zero: value = { Format.plain($0) }
        }
        guard let interval = verdict.interval else { return value(verdict.estimate) }
        return "\(value(verdict.estimate)) [\(value(interval.low)), \(value(interval.high))]"
    }

    /// "0.61× [0.55×, 0.70×] GCD" for a row without a goal.
    static func comparisonText(_ comparison: (peer: String, estimate: Double, interval: Interval)) -> String {
        "\(Format.ratio(comparison.estimate)) [\(Format.ratio(comparison.interval.low)), \(Format.ratio(comparison.interval.high))] \(comparison.peer)"
    }

    static func outcomeText(_ outcome: Outcome, emphasis: Bool) -> String {
        switch outcome {
        case .met: "met"
        case .missed: emphasis ? "**MISSED**" : "MISSED"
        case .inconclusive: emphasis ? "*inconclusive*" : "inconclusive"
        }
    }

    private var tally: String {
        let verdicts = self.verdicts.map(\.verdict.outcome)
        return "met \(verdicts.count { $0 == .met }), missed \(verdicts.count { $0 == .missed }), "
            + "inconclusive \(verdicts.count { $0 == .inconclusive }) of \(verdicts.count) goals"
    }

    // MARK: - Text table

    /// The table for standard output, one block per workload.
    func table() -> String {
        let header = ["workload", "implementation", "metric", "median [min .. max]", "× floor", "ThreadKit/peer [95% CI]", "goal", "verdict"]
        var lines: [[String]] = []
        var previous: String?
        for row in rows {
            if let previous, previous != row.workload { lines.append([]) }
            previous = row.workload
            let range = "\(row.text(row.median)) [\(Format.plain(row.min)) .. \(Format.plain(row.max))]"
            lines.append(
                [row.workload, row.implementation, row.metric, range, row.timesFloor.map(Format.ratio) ?? ""]
                    + row.judgementCells(emphasis: false))
        }
        var widths = header.map(\.count)
        for cells in lines where !cells.isEmpty {
            for (index, cell) in cells.enumerated() { widths[index] = Swift.max(widths[index], cell.count) }
        }
        func render(_ cells: [String]) -> String {
            zip(cells, widths).map { cell, width in cell.padding(toLength: width, withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }
        var text = render(header) + "\n" + String(repeating: "-", count: widths.reduce(0, +) + 2 * (widths.count - 1)) + "\n"
        for cells in lines { text += cells.isEmpty ? "\n" : render(cells) + "\n" }
        text += "\nThreadKit: \(tally) (\(scale.rounds) rounds; ratio = median of paired per-round ratios, "
        text += "or of pooled percentiles, with a 95 % bootstrap interval).\n"
        for failure in failures { text += "Left out, its process failed: \(failure)\n" }
        return text
    }

    // MARK: - JSON

    /// The JSON file: the run, its machine, every row, every verdict.
    private struct JSONDocument: Encodable {
        /// A goal's verdict with its interval.
        struct JSONGoal: Encodable {
            let workload, metric, goal: String
            let estimate: Double
            let low, high: Double?
            let verdict: Outcome
            let met: Bool
        }
        let mode: String
        let rounds: Int
        let machine: Machine
        let rows: [Row]
        let goals: [JSONGoal]
        let workloadSeconds: [String: Double]
        let failures: [String]
    }

    func json() throws -> Data {
        let document = JSONDocument(
            mode: isQuick ? "quick" : "full", rounds: scale.rounds, machine: machine,
            rows: rows,
            goals: verdicts.map { row, verdict in
                .init(workload: row.workload, metric: row.metric, goal: verdict.goal.text,
                      estimate: verdict.estimate, low: verdict.interval?.low, high: verdict.interval?.high,
                      verdict: verdict.outcome, met: verdict.outcome == .met)
            },
            workloadSeconds: Dictionary(seconds.map { ($0.workload, $0.seconds) }, uniquingKeysWith: { a, _ in a }),
            failures: failures)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // A ratio of two zero medians (a row with nothing to count in a quick run) is not a number;
        // JSON has no literal for it, so it is written as a string rather than failing the whole file.
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        return try encoder.encode(document)
    }

    // MARK: - Markdown

    static let beginMarker = "<!-- threadkit-bench results: begin. Generated by the benchmark; everything down to the end marker is replaced on each run. -->"
    static let endMarker = "<!-- threadkit-bench results: end -->"

    /// The generated results section, markers included. `charts` are (caption, relative path).
    func markdownSection(charts: [(caption: String, path: String)]) -> String {
        var text = Self.beginMarker + "\n\n"
        text += "Measured \(machine.date) on \(machine.cpu), \(machine.cores) cores, \(machine.memoryText), "
        text += "\(machine.kernel); Swift \(machine.swift), \(machine.build) build of revision `\(machine.revision)`. "
        text += "Load average \(machine.loadAverageAtStart) at the start, \(machine.loadAverageAtEnd ?? "?") at the end; "
        text += "`/proc/pressure/cpu` \(machine.cpuPressureAtStart) at the start, \(machine.cpuPressureAtEnd ?? "?") at the end. "
        text += "Command: `\(command)` (\(isQuick ? "quick mode, a tenth of the sizes" : "full size")), "
        let total = seconds.map(\.seconds).reduce(0, +)
        text += String(format: "%.0f s in all. ", total)
        text += "\(scale.rounds) rounds per workload"
        if scale.manyRounds != scale.rounds {
            text += " (\(scale.manyRounds) for " + Scale.manyRoundWorkloads.sorted().map { "`\($0)`" }.joined(separator: ", ") + ")"
        }
        text += ", every contender's round in a fresh process after a warm-up in it. "
        text += "A figure is the median of the rounds (a percentile: of every round's samples pooled), with the "
        text += "rounds' minimum and maximum; *ThreadKit/peer* is the median of the per-round ratios (for a "
        text += "percentile, the ratio of the pooled percentiles) with its 95 % bootstrap interval.\n\n"
        text += "| workload | implementation | metric | median | min – max | × floor | ThreadKit/peer [95 % CI] | goal | verdict |\n"
        text += "|---|---|---|--:|--:|--:|--:|---|---|\n"
        for row in rows {
            let cells: [String] = [
                "`\(row.workload)`", row.implementation, row.metric, row.text(row.median),
                "\(Format.plain(row.min)) – \(Format.plain(row.max))", row.timesFloor.map(Format.ratio) ?? "",
            ] + row.judgementCells(emphasis: true)
            let emphasised = row.implementation == "ThreadKit" ? cells.enumerated().map { $0 == 1 ? "**\($1)**" : $1 } : cells
            text += "| " + emphasised.joined(separator: " | ") + " |\n"
        }
        text += "\nThreadKit: **\(tally)**.\n"
        for failure in failures { text += "\nLeft out, its process failed: \(failure)\n" }
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
