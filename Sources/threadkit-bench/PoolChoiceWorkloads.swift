// The workloads users choose a pool by (issue 13, item 3).
import Dispatch
import Foundation
import ThreadKit

/// Open-loop latency, memory, blocking tasks, fairness, an idle pool and Swift tasks.
enum PoolChoiceWorkloads {
    static let catalogue: [WorkloadEntry] = []
}
