/// The cycles of a wait-for graph: the pure part of reporting deadlocks in a snapshot.
///
/// Each blocked thread has at most one edge, to the thread that holds what it waits for, so the
/// graph is a set of chains, and each chain ends either at a thread that is not blocked (it will
/// go on) or in one cycle. No clock, no threads: tests build graphs by hand.
enum WaitCycles {
    /// The cycles among `edges` (thread → holder), each once, each starting with its smallest
    /// thread, ordered by that thread.
    static func find<Thread: Comparable>(_ edges: [Thread: Thread]) -> [[Thread]] {
        var cycles: [[Thread]] = []
        var settled: Set<Thread> = []
        for start in edges.keys.sorted() where !settled.contains(start) {
            var path: [Thread] = []
            var onPath: [Thread: Int] = [:]
            var current: Thread? = start
            while let thread = current, !settled.contains(thread) {
                if let index = onPath[thread] {
                    let cycle = Array(path[index...])
                    let smallest = cycle.indices.min { cycle[$0] < cycle[$1] }!
                    cycles.append(Array(cycle[smallest...] + cycle[..<smallest]))
                    break
                }
                onPath[thread] = path.count
                path.append(thread)
                current = edges[thread]
            }
            settled.formUnion(path)
        }
        return cycles.sorted { $0[0] < $1[0] }
    }
}
