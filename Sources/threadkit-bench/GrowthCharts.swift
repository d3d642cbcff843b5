// Cost-growth curves: how a cost grows with its work (pending timers, threads, producers), as
// lines on log–log axes, one per implementation, drawn from the report's rows.
import Foundation

/// One curve family: the workloads that make its points, and the metric drawn.
struct GrowthSeries {
    let file: String
    let caption: String
    let title: String
    let xLabel: String
    let metric: String
    /// (x value, workload id) for each point.
    let points: [(x: Double, workload: String)]

    /// Every curve family the benchmark draws, with the pending-call counts of `scale`.
    static func all(scale: Scale) -> [GrowthSeries] { [
        GrowthSeries(
            file: "benchmark-timer-insert-growth.svg", caption: "Timer insert cost by pending calls",
            title: "timer.pending: insert per call by pending calls", xLabel: "pending calls",
            metric: "insert per call", points: TimerWorkloads.pendingSizes.map { (Double(scale.size($0)), TimerWorkloads.pendingID($0)) }),
        GrowthSeries(
            file: "benchmark-timer-cancel-growth.svg", caption: "Timer cancel cost by pending calls",
            title: "timer.pending: cancel per call by pending calls", xLabel: "pending calls",
            metric: "cancel per call", points: TimerWorkloads.pendingSizes.map { (Double(scale.size($0)), TimerWorkloads.pendingID($0)) }),
        GrowthSeries(
            file: "benchmark-pool-threads-growth.svg", caption: "Pool throughput by pool threads",
            title: "pool.threads: wall per item by pool threads (1 producer)", xLabel: "pool threads",
            metric: "wall per item", points: PoolWorkloads.threadCounts.map { (Double($0), "pool.threads.t\($0)") }),
        GrowthSeries(
            file: "benchmark-pool-producers-growth.svg", caption: "Pool throughput by producer threads",
            title: "pool.throughput: wall per item by producer threads (2 pool threads)", xLabel: "producer threads",
            metric: "wall per item", points: PoolWorkloads.producerCounts.map { (Double($0), "pool.throughput.p\($0)") }),
    ] }
}

/// Draws the cost-growth curves.
enum GrowthCharts {
    static func render(_ rows: [Row], scale: Scale) -> [(name: String, caption: String, svg: String)] {
        GrowthSeries.all(scale: scale).compactMap { series in
            chart(series, rows: rows).map { (series.file, series.caption, $0) }
        }
    }

    /// The lines of `series` from `rows`: each implementation's medians, whiskers from min to max.
    static func chart(_ series: GrowthSeries, rows: [Row]) -> String? {
        var lines: [(name: String, points: [(x: Double, row: Row)])] = []
        for (x, workload) in series.points {
            for row in rows where row.workload == workload && row.metric == series.metric {
                if let index = lines.firstIndex(where: { $0.name == row.implementation }) {
                    lines[index].points.append((x, row))
                } else {
                    lines.append((row.implementation, [(x, row)]))
                }
            }
        }
        lines.removeAll { $0.points.count < 2 }
        guard !lines.isEmpty, let unit = lines.first?.points.first?.row.unit else { return nil }
        let xs = lines.flatMap { $0.points.map(\.x) }
        let values = lines.flatMap { $0.points.flatMap { [$0.row.min, $0.row.max] } }.filter { $0 > 0 }
        guard let lowestX = xs.min(), let highestX = xs.max(), highestX > lowestX,
              let lowest = values.min(), let highest = values.max() else { return nil }
        var plot = LogPlot(
            height: 440, legendLines: lines.count, title: series.title,
            subtitle: "Median of the rounds, whiskers min to max; both axes logarithmic. Lower is better.",
            lowest: lowest, highest: highest)
        func px(_ x: Double) -> Double {
            plot.left + plot.plotWidth * (log10(x) - log10(lowestX)) / (log10(highestX) - log10(lowestX))
        }
        for x in Set(xs).sorted() { plot.xTick(at: px(x), Format.plain(x), solid: false) }
        plot.axisLabels(x: series.xLabel, y: "\(series.metric) (\(unit))")
        for line in lines {
            let colour = Charts.colour(line.name)
            plot.svg.polyline(line.points.map { (px($0.x), plot.py($0.row.median)) }, stroke: colour)
            for point in line.points {
                plot.svg.line(px(point.x), plot.py(point.row.min), px(point.x), plot.py(point.row.max), stroke: colour)
            }
        }
        plot.legend(lines.map { line in
            (line.name, "\(line.name) — " + line.points.map { "\(Format.plain($0.x)): \(Format.plain($0.row.median))" }.joined(separator: ", ") + " \(unit)")
        })
        return plot.svg.document
    }
}
