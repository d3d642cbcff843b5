extension ThreadPool {
    /// Runs a Swift concurrency job on a pool thread.
    ///
    /// This makes the pool usable with `withTaskExecutorPreference(pool) { … }` and
    /// `Task(executorPreference: pool) { … }`. Jobs skip `queueLimit` (blocking or refusing one would
    /// stall a Swift task). A job that arrives after ``dispose()``, or is still queued at
    /// ``disposeNow()``, runs on the global concurrent executor instead, so no task is ever lost.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        do {
            try submit(.job(job), ignoringLimit: true)
        } catch {
            Log.log(.threadPool, "\(name): disposed; a Swift task job moves to the global executor")
            globalConcurrentExecutor.enqueue(ExecutorJob(job))
        }
    }
}
