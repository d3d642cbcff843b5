// Charts as hand-written SVG: bars for the pool's cost per item, and percentile curves for the
// latency distributions.
import Foundation

/// A small SVG document builder.
struct SVG {
    let width: Double
    let height: Double
    private var elements: [String] = []

    init(width: Double, height: Double) {
        self.width = width
        self.height = height
    }

    mutating func rect(x: Double, y: Double, width: Double, height: Double, fill: String, opacity: Double = 1) {
        elements.append("<rect x=\"\(n(x))\" y=\"\(n(y))\" width=\"\(n(max(width, 0)))\" height=\"\(n(height))\" fill=\"\(fill)\" fill-opacity=\"\(n(opacity))\"/>")
    }

    mutating func line(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, stroke: String, width: Double = 1, dashed: Bool = false) {
        let dash = dashed ? " stroke-dasharray=\"3,3\"" : ""
        elements.append("<line x1=\"\(n(x1))\" y1=\"\(n(y1))\" x2=\"\(n(x2))\" y2=\"\(n(y2))\" stroke=\"\(stroke)\" stroke-width=\"\(n(width))\"\(dash)/>")
    }

    mutating func polyline(_ points: [(Double, Double)], stroke: String, width: Double = 2) {
        let list = points.map { "\(n($0.0)),\(n($0.1))" }.joined(separator: " ")
        elements.append("<polyline points=\"\(list)\" fill=\"none\" stroke=\"\(stroke)\" stroke-width=\"\(n(width))\" stroke-linejoin=\"round\"/>")
    }

    /// Where a text sits relative to its x.
    enum Anchor: String { case start, middle, end }

    mutating func text(_ string: String, x: Double, y: Double, size: Double = 12, anchor: Anchor = .start,
                       weight: String = "normal", fill: String = "#24292f", rotate: Bool = false) {
        let transform = rotate ? " transform=\"rotate(-90 \(n(x)) \(n(y)))\"" : ""
        elements.append("<text x=\"\(n(x))\" y=\"\(n(y))\" font-size=\"\(n(size))\" text-anchor=\"\(anchor.rawValue)\" font-weight=\"\(weight)\" fill=\"\(fill)\"\(transform)>\(escape(string))</text>")
    }

    var document: String {
        """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(n(width))" height="\(n(height))" viewBox="0 0 \(n(width)) \(n(height))" font-family="-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif">
        <rect width="100%" height="100%" fill="#ffffff"/>
        \(elements.joined(separator: "\n"))
        </svg>

        """
    }

    private func n(_ value: Double) -> String {
        String(format: "%.1f", value)
    }

    private func escape(_ string: String) -> String {
        string.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}

/// The bar and percentile charts, and the colour of each implementation.
enum Charts {
    /// One colour per implementation, the same in every chart.
    static func colour(_ implementation: String) -> String {
        switch implementation {
        case "ThreadKit": "#0969da"
        case "GCD", "GCD asyncAfter", "GCD chain": "#e16f24"
        case "OperationQueue": "#1a7f37"
        case "DispatchSourceTimer": "#8250df"
        default: "#6e7781"
        }
    }

    // MARK: - Bars

    /// Horizontal bars of a per-item cost: one group per (workload, metric), one bar per
    /// implementation at its median, whiskers from min to max. Each group has its own scale.
    static func bars(title: String, subtitle: String, results: [WorkloadResult], metrics: [String]) -> String? {
        var groups: [BarGroup] = []
        for result in results {
            for name in metrics {
                guard let metric = result.metrics.first(where: { $0.name == name }) else { continue }
                let bars = result.contenders.compactMap { contender -> (name: String, summary: Summary)? in
                    let values = contender.values(name)
                    return values.isEmpty ? nil : (contender.name, Summary(values))
                }
                if !bars.isEmpty { groups.append(BarGroup(title: "\(result.id) — \(name)", unit: metric.unit, bars: bars)) }
            }
        }
        guard !groups.isEmpty else { return nil }
        let barHeight = 18.0, barGap = 5.0, groupHeader = 24.0, groupGap = 14.0
        let left = 150.0, right = 120.0, width = 820.0, top = 62.0
        let plotWidth = width - left - right
        let barsHeight = groups.map { groupHeader + Double($0.bars.count) * (barHeight + barGap) + groupGap }.reduce(0, +)
        let height = top + barsHeight + 10
        var svg = SVG(width: width, height: height)
        svg.text(title, x: 16, y: 26, size: 16, weight: "bold")
        svg.text(subtitle, x: 16, y: 46, size: 12, fill: "#57606a")
        var y = top
        for group in groups {
            svg.text(group.title + " (\(group.unit))", x: 16, y: y + 15, size: 13, weight: "bold")
            y += groupHeader
            let scale = (group.bars.map { $0.summary.max }.max() ?? 1) * 1.05
            for bar in group.bars {
                let x = { (value: Double) in left + plotWidth * value / max(scale, .leastNonzeroMagnitude) }
                svg.text(bar.name, x: left - 8, y: y + barHeight - 5, size: 12, anchor: .end)
                svg.rect(x: left, y: y, width: x(bar.summary.median) - left, height: barHeight, fill: colour(bar.name), opacity: 0.85)
                let middle = y + barHeight / 2
                svg.line(x(bar.summary.min), middle, x(bar.summary.max), middle, stroke: "#24292f")
                svg.line(x(bar.summary.min), middle - 4, x(bar.summary.min), middle + 4, stroke: "#24292f")
                svg.line(x(bar.summary.max), middle - 4, x(bar.summary.max), middle + 4, stroke: "#24292f")
                svg.text("\(Format.plain(bar.summary.median)) \(group.unit)", x: x(bar.summary.max) + 6, y: y + barHeight - 5, size: 12)
                y += barHeight + barGap
            }
            y += groupGap
        }
        return svg.document
    }

    /// One metric of one workload: a bar per implementation, its median with its rounds' range.
    private struct BarGroup {
        let title: String
        let unit: String
        let bars: [(name: String, summary: Summary)]
    }

    // MARK: - Percentile curves

    /// The latency distribution of each implementation in `result` as a percentile curve over
    /// every round's samples pooled (as in the table). x is the percentile on a log scale of
    /// 1 / (1 − q) (p0, p90, p99, p99.9 …, so the tail gets room), y the value on a log scale.
    static func percentiles(title: String, subtitle: String, unit: String, samples: String, result: WorkloadResult) -> String? {
        let series = result.contenders.filter { !$0.samples(samples).isEmpty }.map { contender in
            (name: contender.name, curve: PooledSamples(contender.samples(samples)).pooled)
        }
        guard !series.isEmpty else { return nil }
        let fewest = series.map(\.curve.count).min()!
        let xMax = min(5, max(2, floor(log10(Double(fewest)))))
        var plot = LogPlot(
            height: 460, legendLines: series.count, title: title, subtitle: subtitle,
            lowest: max(series.map { $0.curve.quantile(0.01) }.min()!, 0.01), highest: series.map { $0.curve.quantile(1) }.max()!)
        func px(_ x: Double) -> Double { plot.left + plot.plotWidth * x / xMax }
        // p0, p50, p90, p99 … on x.
        var ticks: [(Double, String)] = [(0, "p0"), (log10(2), "p50"), (1, "p90")]
        var nines = "99"
        for x in stride(from: 2.0, through: xMax, by: 1) {
            ticks.append((x, "p" + nines))
            nines = nines == "99" ? "99.9" : nines + "9"
        }
        for (x, label) in ticks { plot.xTick(at: px(x), label, solid: x == 0) }
        plot.axisLabels(x: "percentile", y: unit + " (log scale)")
        for (name, curve) in series {
            let steps = 400
            let points = (0...steps).map { step -> (Double, Double) in
                let x = xMax * Double(step) / Double(steps)
                let q = 1 - pow(10, -x)
                return (px(x), plot.py(curve.quantile(q)))
            }
            plot.svg.polyline(points, stroke: colour(name))
        }
        plot.legend(series.map { name, curve in
            (name, "\(name): p50 \(Format.plain(curve.quantile(0.5))), p99 \(Format.plain(curve.quantile(0.99))), "
                + "max \(Format.plain(curve.quantile(1))) \(unit) (\(curve.count) samples)")
        })
        return plot.svg.document
    }
}

/// A chart with a logarithmic y axis: its title and subtitle, the decades as grid lines with their
/// labels, the x ticks and axis labels, and a legend of one line per implementation below.
struct LogPlot {
    static let width = 820.0
    let left = 78.0, top = 64.0
    let plotWidth: Double, plotHeight: Double
    /// The decades the y axis spans.
    let yMin: Double, yMax: Double
    var svg: SVG

    /// A chart of `height` whose y axis spans the decades around `lowest`…`highest` (both positive).
    init(height: Double, legendLines: Int, title: String, subtitle: String, lowest: Double, highest: Double) {
        let right = 24.0, bottom = 58.0 + Double(legendLines) * 18
        plotWidth = Self.width - left - right
        plotHeight = height - top - bottom
        yMin = pow(10, floor(log10(lowest)))
        yMax = pow(10, ceil(log10(max(highest, yMin * 10))))
        svg = SVG(width: Self.width, height: height)
        svg.text(title, x: 16, y: 26, size: 16, weight: "bold")
        svg.text(subtitle, x: 16, y: 46, size: 12, fill: "#57606a")
        var decade = yMin
        while decade <= yMax * 1.0001 {
            svg.line(left, py(decade), left + plotWidth, py(decade), stroke: "#d0d7de", dashed: decade != yMin)
            svg.text(Format.plain(decade), x: left - 6, y: py(decade) + 4, size: 11, anchor: .end, fill: "#57606a")
            decade *= 10
        }
    }

    /// The y of `value`, clamped to the axis.
    func py(_ value: Double) -> Double {
        let clamped = min(max(value, yMin), yMax)
        return top + plotHeight * (1 - (log10(clamped) - log10(yMin)) / (log10(yMax) - log10(yMin)))
    }

    /// A vertical grid line at `x` (dashed unless `solid`) with its label under the axis.
    mutating func xTick(at x: Double, _ label: String, solid: Bool) {
        svg.line(x, top, x, top + plotHeight, stroke: "#d0d7de", dashed: !solid)
        svg.text(label, x: x, y: top + plotHeight + 16, size: 11, anchor: .middle, fill: "#57606a")
    }

    mutating func axisLabels(x: String, y: String) {
        svg.text(x, x: left + plotWidth / 2, y: top + plotHeight + 34, size: 12, anchor: .middle, fill: "#57606a")
        svg.text(y, x: 18, y: top + plotHeight / 2, size: 12, anchor: .middle, fill: "#57606a", rotate: true)
    }

    /// One line per entry: the implementation's colour, then `text`.
    mutating func legend(_ entries: [(implementation: String, text: String)]) {
        var y = top + plotHeight + 58
        for (implementation, text) in entries {
            svg.line(left, y - 4, left + 24, y - 4, stroke: Charts.colour(implementation), width: 3)
            svg.text(text, x: left + 32, y: y, size: 12)
            y += 18
        }
    }
}

/// A median with the minimum and maximum of the rounds, for a bar and its whisker.
struct Summary {
    let median: Double
    let min: Double
    let max: Double

    init(_ rounds: [Double]) {
        let distribution = Distribution(rounds)
        median = distribution.median
        min = distribution.min
        max = distribution.max
    }
}

/// The charts a run writes, by file name.
enum ChartFiles {
    static func render(_ results: [WorkloadResult], rows: [Row], scale: Scale) -> [(name: String, caption: String, svg: String)] {
        var files: [(name: String, caption: String, svg: String)] = []
        let rounds = results.first?.contenders.first?.rounds.count ?? 0
        let barIDs = ["floor.spsc.shared", "floor.spsc.free", "pool.throughput.p1", "pool.throughput.p2",
                      "pool.throughput.free.p1", "pool.throughput.free.p2", "pool.schedule.p1"]
        let pools = barIDs.compactMap { id in results.first { $0.id == id } }
        if let svg = Charts.bars(
            title: "ThreadPool vs GCD vs OperationQueue: cost per item, 2 threads",
            subtitle: "Bars: median of \(rounds) rounds; whiskers: min to max. Shorter is better. Each group has its own scale.",
            results: pools, metrics: ["wall per item", "CPU per item"]) {
            files.append(("benchmark-pool-throughput.svg", "Pool throughput: ns per item", svg))
        }
        // Each chart's workload, sample set, file, caption, title, and what its samples are.
        let curves: [(id: String, samples: String, file: String, caption: String, title: String, what: String)] = [
            ("timer.fire", "lateness", "benchmark-timer-lateness.svg", "Timer lateness distribution",
             "timer.fire: how late one-shot calls run", "Lateness = run time − deadline"),
            ("timer.fire.work", "lateness", "benchmark-timer-lateness-work.svg", "Timer lateness with 15 µs of work per call",
             "timer.fire.work: how late one-shot calls run when each works 15 µs", "Lateness = run time − deadline"),
            ("pool.wake", "start latency", "benchmark-pool-wake.svg", "Pool wake-up latency distribution",
             "pool.wake: submit to start on an idle pool", "One submission per millisecond"),
            ("throttle.precision", "error", "benchmark-throttle-error.svg", "Throttle start-to-start error distribution",
             "throttle.precision: |start-to-start gap − 10 ms|", "1 ms tasks at a 10 ms interval"),
        ]
        for curve in curves {
            guard let result = results.first(where: { $0.id == curve.id }),
                  let svg = Charts.percentiles(
                    title: curve.title, subtitle: "\(curve.what), samples of \(rounds) rounds pooled. Lower is better.",
                    unit: "µs", samples: curve.samples, result: result)
            else { continue }
            files.append((curve.file, curve.caption, svg))
        }
        files += GrowthCharts.render(rows, scale: scale)
        return files
    }
}
