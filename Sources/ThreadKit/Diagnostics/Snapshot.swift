import Foundation

/// Everything ThreadKit is running at one moment: every live component with its configuration,
/// statistics and threads, and the wait-for graph of the threads blocked in its waits.
///
/// Take one with ``Diagnostics/snapshot(longWaitsOver:)``. Its ``description`` is the dump for
/// people, laid out like the JVM's `jstack`: deadlocks and long waits first, then one block per
/// component. ``json(prettyPrinted:)`` is the same content for programs; `Snapshot` is `Codable`, so
/// `JSONDecoder().decode(Snapshot.self, from: Data(snapshot.json().utf8))` reads it back.
///
/// Times are given as durations before ``takenAt`` (in seconds), measured on the monotonic clock,
/// so a clock set while the program runs cannot distort them.
public struct Snapshot: Codable, Sendable, Equatable, CustomStringConvertible {
    /// The wall-clock time the snapshot was taken.
    public var takenAt: Date
    /// The process the snapshot describes.
    public var processID: Int32
    /// How long a wait lasts before the dump lists it among the long waits, in seconds.
    public var longWaitThreshold: Double
    /// Every live component, in the order they were created.
    public var components: [Component]
    /// Threads that belong to no component but are blocked in one of ThreadKit's waits (the main
    /// thread in a `sync`, a cooperative thread in `ScheduledTask.wait()`…), or run work given
    /// with a `label:` (a caller's own turn in `ThrottledQueue.sync(label:_:)`).
    public var otherThreads: [Thread]
    /// The wait-for graph: one edge per thread blocked in one of ThreadKit's waits.
    public var waits: [Wait]
    /// The cycles of ``waits``: threads that wait for each other and will never go on. Each cycle
    /// starts with its thread of lowest kernel id.
    public var cycles: [[Wait]]

    /// Creates a snapshot from its parts (for tests and tools that build one by hand).
    public init(
        takenAt: Date, processID: Int32, longWaitThreshold: Double, components: [Component],
        otherThreads: [Thread], waits: [Wait], cycles: [[Wait]]
    ) {
        self.takenAt = takenAt
        self.processID = processID
        self.longWaitThreshold = longWaitThreshold
        self.components = components
        self.otherThreads = otherThreads
        self.waits = waits
        self.cycles = cycles
    }

    /// The waits longer than ``longWaitThreshold``, longest first.
    public var longWaits: [Wait] {
        waits.filter { $0.seconds >= longWaitThreshold }.sorted { $0.seconds > $1.seconds }
    }

    /// The snapshot as JSON, keys sorted, dates as `JSONEncoder`'s default (seconds since 2001).
    public func json(prettyPrinted: Bool = true) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = prettyPrinted ? [.prettyPrinted, .sortedKeys] : [.sortedKeys]
        // A value set by hand to an infinity or NaN is written as Prometheus spells it.
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "+Inf", negativeInfinity: "-Inf", nan: "NaN")
        // Every field is a string, a number or an array of them: encoding cannot fail.
        let data = try! encoder.encode(self)
        return String(decoding: data, as: UTF8.self)
    }
}

extension Snapshot {
    /// One live component: a thread pool, a timer thread, a throttled queue, a dedicated thread,
    /// a URL dispatcher or a Redis client.
    public struct Component: Codable, Sendable, Equatable {
        /// The component's type: `"ThreadPool"`, `"TimerThread"`, `"ThrottledQueue"`,
        /// `"DedicatedThread"`, `"URLDispatcher"` or `"RedisClient"`.
        public var kind: String
        /// The name its creator gave it (a pool's name, a queue's label…).
        public var name: String
        /// How it was set up: `size`, `keepAlive`, `interval`… as text, in a fixed order.
        public var configuration: [Field]
        /// Its counters and gauges, also exported by ``Diagnostics/prometheusText()``.
        public var metrics: [Metric]
        /// Its threads, in the order they were started.
        public var threads: [Thread]
        /// Work it holds that has not started: a timer's next due calls, a queue's next start.
        /// At most a few entries; ``pendingCount`` counts them all.
        public var pending: [Pending]
        /// How many pieces of work it holds that have not started.
        public var pendingCount: Int
        /// A URL dispatcher's endpoints (empty for other components).
        public var endpoints: [Endpoint]

        /// Creates a component's entry.
        public init(
            kind: String, name: String, configuration: [Field] = [], metrics: [Metric] = [],
            threads: [Thread] = [], pending: [Pending] = [], pendingCount: Int = 0, endpoints: [Endpoint] = []
        ) {
            self.kind = kind
            self.name = name
            self.configuration = configuration
            self.metrics = metrics
            self.threads = threads
            self.pending = pending
            self.pendingCount = pendingCount
            self.endpoints = endpoints
        }
    }

    /// A named value of a component's configuration, as text: `size = 4`, `keepAlive = 10.0s`.
    public struct Field: Codable, Sendable, Equatable {
        /// The setting's name, as the component's initializer calls it.
        public var name: String
        /// Its value, as text.
        public var value: String

        /// Creates a field.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// A thread ThreadKit knows: one of its components' threads, or a thread blocked in one of its waits.
    public struct Thread: Codable, Sendable, Equatable {
        /// What a thread is doing.
        public enum State: String, Codable, Sendable {
            /// Running work (``Thread/work`` says which).
            case running
            /// Looking for work for a moment before it sleeps.
            case spinning
            /// Idle: waiting for work, or for a time (``Thread/until``).
            case sleeping
            /// Blocked in one of ThreadKit's waits (``Thread/waitsFor`` says for what).
            case blocked
        }

        /// The whole name ThreadKit gave the thread (`"Downloads Thread3"`).
        public var name: String
        /// The name the kernel shows (`top -H`, `ps -L`, gdb): at most 15 bytes.
        public var kernelName: String
        /// The kernel's thread id (what `gettid()` returns and `/proc/<pid>/task/` lists).
        public var kernelThreadID: Int32
        /// What the thread is doing.
        public var state: State
        /// How long it has been in ``state``, in seconds.
        public var seconds: Double
        /// For a thread sleeping until a time (a timer thread's next call, a queue's next start):
        /// how far ahead that time is, in seconds.
        public var until: Double?
        /// What it runs: the `label:` its caller gave, or the kind of work (`"task"`, `"timer call"`).
        public var work: String?
        /// For a blocked thread: what it waits for (`DedicatedThread "db"`, `a task of ThreadPool "io"`).
        public var waitsFor: String?

        /// Creates a thread's entry.
        public init(
            name: String, kernelName: String, kernelThreadID: Int32, state: State, seconds: Double,
            until: Double? = nil, work: String? = nil, waitsFor: String? = nil
        ) {
            self.name = name
            self.kernelName = kernelName
            self.kernelThreadID = kernelThreadID
            self.state = state
            self.seconds = seconds
            self.until = until
            self.work = work
            self.waitsFor = waitsFor
        }
    }

    /// A thread named in a wait: its whole name and kernel id.
    public struct ThreadReference: Codable, Sendable, Hashable {
        /// The thread's whole name.
        public var name: String
        /// The kernel's thread id.
        public var kernelThreadID: Int32

        /// Creates a reference.
        public init(name: String, kernelThreadID: Int32) {
            self.name = name
            self.kernelThreadID = kernelThreadID
        }
    }

    /// An edge of the wait-for graph: `thread` is blocked until `waitsFor` lets it go on, and
    /// `holder`, if known, is the thread that must act first (it runs, or holds, what is waited for).
    public struct Wait: Codable, Sendable, Equatable {
        /// The blocked thread.
        public var thread: ThreadReference
        /// The kind of wait: `"sync"`, `"wait"`, `"full queue"`, `"slot"`, `"termination"`…
        public var kind: String
        /// What it waits for, as messages name it: `DedicatedThread "db"`.
        public var waitsFor: String
        /// The thread that holds or runs it; `nil` when no one thread does (queued work, a
        /// `DispatchQueue`, a free-for-all).
        public var holder: ThreadReference?
        /// How long the thread has waited, in seconds.
        public var seconds: Double

        /// Creates an edge.
        public init(thread: ThreadReference, kind: String, waitsFor: String, holder: ThreadReference?, seconds: Double) {
            self.thread = thread
            self.kind = kind
            self.waitsFor = waitsFor
            self.holder = holder
            self.seconds = seconds
        }
    }

    /// Work a component holds that has not started yet.
    public struct Pending: Codable, Sendable, Equatable {
        /// What it is: a timer call's tag, or `"the next task"` of a queue.
        public var what: String
        /// How far ahead it is due, in seconds (negative: overdue).
        public var dueIn: Double
        /// Why it waits: `"gap"`, `"window"`, `"pause"`, `"due"`….
        public var reason: String

        /// Creates an entry.
        public init(what: String, dueIn: Double, reason: String) {
            self.what = what
            self.dueIn = dueIn
            self.reason = reason
        }
    }

    /// One endpoint of a URL dispatcher.
    public struct Endpoint: Codable, Sendable, Equatable {
        /// Scheme, lower-cased host and port: `https://api.example.com:443`.
        public var endpoint: String
        /// Requests running now.
        public var running: Int
        /// Requests waiting for a slot.
        public var queued: Int
        /// For a paused endpoint (a `Retry-After`), how far ahead the pause ends, in seconds.
        public var pausedFor: Double?

        /// Creates an entry.
        public init(endpoint: String, running: Int, queued: Int, pausedFor: Double? = nil) {
            self.endpoint = endpoint
            self.running = running
            self.queued = queued
            self.pausedFor = pausedFor
        }
    }

    /// A counter, a gauge or a histogram of one component, named without the `threadkit_<part>_`
    /// prefix that ``Diagnostics/prometheusText()`` adds.
    public struct Metric: Codable, Sendable, Equatable {
        /// Prometheus's metric types.
        public enum Kind: String, Codable, Sendable {
            /// Only goes up (its name ends in `_total`).
            case counter
            /// Goes up and down.
            case gauge
            /// Counts of observations in cumulative buckets, with their sum and count.
            case histogram
        }

        /// The name after the prefix, with its unit: `tasks_completed_total`, `lateness_seconds`.
        public var name: String
        /// The metric's type.
        public var kind: Kind
        /// One line that says what it counts (the `# HELP` text).
        public var help: String
        /// Labels besides the component's own (`endpoint`, `outcome`), in order.
        public var labels: [Field]
        /// The value of a counter or a gauge; a histogram's sum.
        public var value: Double
        /// A histogram's buckets: upper bounds and cumulative counts, the last bound `+Inf`.
        public var buckets: [Bucket]

        /// Creates a counter or a gauge.
        public init(_ name: String, _ kind: Kind, _ value: Double, help: String, labels: [Field] = []) {
            self.name = name
            self.kind = kind
            self.help = help
            self.labels = labels
            self.value = value
            buckets = []
        }

        /// Creates a histogram: `buckets` cumulative, ending with the `+Inf` bucket (the count).
        public init(histogram name: String, sum: Double, buckets: [Bucket], help: String, labels: [Field] = []) {
            self.name = name
            kind = .histogram
            self.help = help
            self.labels = labels
            value = sum
            self.buckets = buckets
        }
    }

    /// A histogram bucket: how many observations were at most ``upperBound``.
    public struct Bucket: Codable, Sendable, Equatable {
        /// The bucket's bound (`.infinity` for the last).
        public var upperBound: Double
        /// Observations at most that bound, cumulative.
        public var count: UInt64

        /// Creates a bucket.
        public init(upperBound: Double, count: UInt64) {
            self.upperBound = upperBound
            self.count = count
        }

        private enum CodingKeys: String, CodingKey { case upperBound, count }

        /// Reads a bucket written by ``encode(to:)``: its bound a number, or the string `"+Inf"`.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if let text = try? container.decode(String.self, forKey: .upperBound), text == "+Inf" {
                upperBound = .infinity
            } else {
                upperBound = try container.decode(Double.self, forKey: .upperBound)
            }
            count = try container.decode(UInt64.self, forKey: .count)
        }

        /// Writes the bucket; JSON has no infinity, so the last bound is the string `"+Inf"`, as
        /// Prometheus writes it.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            if upperBound == .infinity {
                try container.encode("+Inf", forKey: .upperBound)
            } else {
                try container.encode(upperBound, forKey: .upperBound)
            }
            try container.encode(count, forKey: .count)
        }
    }
}
