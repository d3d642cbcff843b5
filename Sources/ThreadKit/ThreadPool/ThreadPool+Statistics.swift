extension ThreadPool {
    /// A snapshot of a pool's threads and work (see ``ThreadPool/statistics``).
    public struct Statistics: Sendable, Equatable, CustomStringConvertible {
        /// Threads alive now, busy or idle.
        public var threads: Int
        /// Threads waiting for work.
        public var idleThreads: Int
        /// Threads running a task.
        public var busyThreads: Int
        /// Tasks accepted and waiting for a thread (cancelled ones not counted).
        public var queuedTasks: Int
        /// Tasks that have run to their end since the pool was made.
        public var completedTasks: Int
        /// The most threads that were ever alive at once; a thread that the system refused to
        /// start never counts.
        public var peakThreads: Int

        /// A one-line summary, e.g. "2 threads (1 busy, 1 idle, peak 2), 0 queued, 7 completed".
        public var description: String {
            "\(threads) threads (\(busyThreads) busy, \(idleThreads) idle, peak \(peakThreads)), "
                + "\(queuedTasks) queued, \(completedTasks) completed"
        }
    }
}
