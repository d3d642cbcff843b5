import Foundation
import Testing
import ThreadKit

// Every ```swift block of Docs/*.md (but URLDispatcher's, in ThreadKitURLTests), compiled and
// run as written: each test holds its block between `// snippet:` markers, after the stand-ins it
// uses and before the checks of what it did. DocSnippetCoverageTests fails when a block is changed
// or added without its copy here.

// MARK: - Stand-ins for what the snippets talk to

/// A database connection that lives on one thread.
private final class Connection: Sendable {
    let rows = LockedValue<[String]>([])
    let vacuumed = Counter()
    func vacuum() { _ = vacuumed.increment() }
    func user(_ id: Int) -> String { "user \(id)" }
    func count() -> Int { rows.withLock { $0.count } }
    func insert(_ batch: Batch) -> Int { rows.withLock { $0 += batch.lines; return $0.count } }
}

/// Rows an actor gathers and hands over: not Sendable.
private final class Batch {
    var lines: [String] = []
    func add(_ line: String) { lines.append(line) }
}

/// An image an actor loads and hands over: not Sendable.
private final class Bitmap {
    var side: Int
    init(path: String) { side = path.count * 100 }
    func scaled(to side: Int) -> Bitmap {
        self.side = side
        return self
    }
    var byteCount: Int { side * side * 4 }
}

private let connection = Connection()
private let pool = ThreadPool(name: "DocsP", size: 2)
private let network = ThreadPool(name: "DocsN", size: 2)
private let db = DedicatedThread(name: "DocsDB")
private let api = ThrottledQueue(label: "Docs API", interval: .zero)
private let url = URL(string: "https://example.com/page")!
private let stored = LockedValue<[String]>([])
private func download(_ url: URL) throws -> Data { Data(url.absoluteString.utf8) }
private func save(_ data: Data) throws -> Int { stored.withLock { $0.append(String(decoding: data, as: UTF8.self)); return $0.count } }
private func notify(_ id: Int) throws -> String { "notified \(id)" }

@Suite("The snippets of Docs/, run as written", .timeLimit(.minutes(1)))
struct DocsExamplesTests {
    // MARK: Docs/DedicatedThread.md

    @Test func dedicatedThreadIntroduction() async throws {
        // snippet: Docs/DedicatedThread.md#1
        let db = DedicatedThread(name: "SQLite")              // the thread starts at once
        try db.execute { connection.vacuum() }                // queued, runs on "SQLite"
        let user = try await db.run { connection.user(42) }   // suspends; no thread blocked

        actor Store {
            let thread = DedicatedThread(name: "Store")
            nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }
            var saved: [String] = []
            func save(_ record: String) { saved.append(record) }   // always on "Store"
        }
        // end snippet

        #expect(user == "user 42")
        #expect(connection.vacuumed.value >= 1)
        let store = Store()
        await store.save("first")
        #expect(await store.saved == ["first"])
        #expect(try await store.thread.run { store.thread.isCurrent })

        // snippet: Docs/DedicatedThread.md#2
        func rowCount() -> Int {
            db.sync { connection.count() }                    // blocks until it ran; from "SQLite" itself: inline
        }
        // end snippet

        #expect(rowCount() == connection.count())
        db.dispose()
        #expect(await db.awaitTermination(within: .seconds(10)))
    }

    @Test func dedicatedThreadSendingWork() async throws {
        let db = DedicatedThread(name: "SQLite import")
        defer { db.dispose() }
        // snippet: Docs/DedicatedThread.md#3
        actor Importer {
            let db: DedicatedThread
            init(db: DedicatedThread) { self.db = db }
            func load(_ lines: [String]) async throws -> Int {
                let batch = Batch()                           // not Sendable: made here, handed over
                for line in lines { batch.add(line) }
                return try await db.run { connection.insert(batch) }   // runs once, on "SQLite"
            }
        }
        // end snippet

        let before = connection.count()
        #expect(try await Importer(db: db).load(["a", "b"]) == before + 2)
    }

    // MARK: Docs/ThreadPool.md

    @Test func threadPoolConfiguration() async {
        // snippet: Docs/ThreadPool.md#1
        let pool = ThreadPool(name: "Render", size: 4,
                              keepAlive: .seconds(10), collectionInterval: .seconds(15),
                              queueLimit: 1_000, whenFull: .block)
        // end snippet

        #expect(pool.queueLimit == 1_000)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test func threadPoolSendingWork() async throws {
        // snippet: Docs/ThreadPool.md#2
        actor Gallery {
            let pool = ThreadPool(name: "Thumbs", size: 4)
            func thumbnail(of path: String) async throws -> Int {
                let image = Bitmap(path: path)              // not Sendable: made here, handed over
                return try await pool.run { image.scaled(to: 128).byteCount }   // runs once, on a pool thread
            }
        }
        // end snippet

        #expect(try await Gallery().thumbnail(of: "cat.png") == 128 * 128 * 4)
    }

    @Test func threadPoolAsTaskExecutor() async {
        let ranOn = LockedValue<String?>(nil)
        @Sendable func render(_ page: Int) async -> String {
            ranOn.withLock { $0 = Thread.current.name }
            return "page \(page)"
        }
        let shown = LockedValue<[String]>([])
        @Sendable func use(_ page: String) { shown.withLock { $0.append(page) } }

        // snippet: Docs/ThreadPool.md#3
        await withTaskExecutorPreference(pool) {
            async let page = render(1)       // runs on a pool thread
            use(await page)
        }
        // end snippet

        #expect(shown.withLock { $0 } == ["page 1"])
        #expect(ranOn.withLock { $0 }?.hasPrefix("DocsP Thread") == true)
    }

    // MARK: Docs/ThrottledQueue.md

    @Test func throttledQueueRateLimitExample() async throws {
        let pages = Recorder<Int>()
        @Sendable func fetchPage(_ page: Int) { pages.append(page) }

        // snippet: Docs/ThrottledQueue.md#1
        let api = ThrottledQueue(label: "API", limit: .rate(5, per: .seconds(1)))
        for page in 1...10 {
            try api.async { fetchPage(page) }
        }
        // end snippet

        await api.waitUntilIdle()
        #expect(pages.values == Array(1...10))
    }

    @Test func throttledQueueIntroduction() async throws {
        let fetched = Counter()
        @Sendable func fetchPage(_ page: Int) { _ = fetched.increment() }

        // snippet: Docs/ThrottledQueue.md#2
        let github = ThrottledQueue(label: "GitHub", interval: .milliseconds(200),
                                    monitor: .concurrent, mutability: .all,
                                    limit: .rate(3, per: .seconds(1)))
        try github.async { fetchPage(1) }
        // end snippet

        await github.waitUntilIdle()
        #expect(fetched.value == 1)
    }

    @Test func throttledQueueRateLimit() async throws {
        // snippet: Docs/ThrottledQueue.md#3
        let api = ThrottledQueue(label: "API", interval: .milliseconds(200), limit: .rate(3, per: .seconds(1)))
        // end snippet

        #expect(api.limit != nil)
        #expect(api.interval == .milliseconds(200))
    }

    @Test func throttledQueuePausingFor429() async throws {
        struct Response { var status: Int; var retryAfter: Int? }
        let sent = Counter()
        @Sendable @discardableResult func send(_ request: String) -> Response {
            sent.increment() == 1 ? Response(status: 429, retryAfter: 30) : Response(status: 200)
        }
        let request = "GET /items"
        let api = ThrottledQueue(label: "API 429", interval: .zero)

        // snippet: Docs/ThrottledQueue.md#4
        try api.async {
            let response = send(request)
            if response.status == 429, let seconds = response.retryAfter {
                api.pause(for: .seconds(seconds))          // nothing starts for 30 s
                try? api.async { send(request) }           // retry at the back of the queue
            }
        }
        // end snippet

        #expect(await eventually { sent.value == 1 && api.pendingCount == 1 })
        #expect(sent.value == 1, "the retry started during the pause")
        api.resume()
        await api.waitUntilIdle()
        #expect(sent.value == 2)
    }

    @Test func throttledQueueRunOnAnActor() async throws {
        // snippet: Docs/ThrottledQueue.md#5
        actor Mirror {
            let github = ThrottledQueue(label: "GitHub mirror", interval: .milliseconds(200))
            var fetched: [Int] = []
            func fetch(_ page: Int) async throws {
                try await github.run {
                    fetched.append(page)                      // the actor's own state: the work runs on the actor
                }
            }
        }
        // end snippet

        let mirror = Mirror()
        try await mirror.fetch(1)
        try await mirror.fetch(2)
        #expect(await mirror.fetched == [1, 2])
    }

    // MARK: Docs/TimerThread.md

    @Test func timerThreadIntroduction() throws {
        let retried = Counter()
        @Sendable func retry() { _ = retried.increment() }

        // snippet: Docs/TimerThread.md#1
        let handle = try TimerThread.shared.schedule(after: .seconds(5)) { retry() }
        // end snippet

        #expect(handle.cancel())
        #expect(retried.value == 0)
    }

    @Test func timerThreadRepeatingCalls() async throws {
        let beats = Counter(), polls = Counter(), beatsAtEachPoll = Recorder<Int>()
        @Sendable func sendHeartbeat() { _ = beats.increment() }
        @Sendable func fetchUpdates() {
            beatsAtEachPoll.append(beats.value)
            _ = polls.increment()
        }

        // snippet: Docs/TimerThread.md#2
        // A heartbeat on the beat: at 1 s, 2 s, 3 s… after the call.
        let heartbeat = try TimerThread.shared.schedule(every: .seconds(1)) { sendHeartbeat() }

        // A poll that never overlaps or crowds the server: now, then 5 s after each poll returned.
        let poll = try TimerThread.shared.schedule(every: .seconds(5), startingAfter: .zero, spacing: .fixedDelay) {
            fetchUpdates()
        }
        // end snippet

        // At least one: a check that a loaded machine runs more than 5 s late sees the second poll too.
        #expect(await eventually { polls.value >= 1 })
        #expect(heartbeat.cancel())
        #expect(poll.cancel())
        // The timer runs its calls in deadline order: the poll, due now, ran before the first beat,
        // however late the machine let the timer thread run.
        #expect(beatsAtEachPoll.values.first == 0)
    }

    // MARK: Docs/DispatchMethod.md

    @Test func dispatchMethodIntroduction() async throws {
        // snippet: Docs/DispatchMethod.md#1
        final class Cache: Sendable {
            let dispatch: DispatchMethod                     // where the user wants the writes to run
            init(dispatch: DispatchMethod = .async(on: .pool(pool))) { self.dispatch = dispatch }
            func store(_ value: String) { dispatch.execute { self.write(value) } }
            func write(_ value: String) { print("stored \(value)") }
        }
        func saveDraft() {                                   // synchronous code: `.sync` blocks its thread
            let cache = Cache(dispatch: .sync(on: .thread(db)))
            cache.store("draft")                             // returns once "draft" is written, on db's thread
        }

        let shown = DispatchMethod.async(on: .pool(network)).execute { try download(url) }
            .then(.async(on: .thread(db))) { data in try save(data) }
            .then(.async(on: .throttled(api))) { id in try notify(id) }
        let id = try await shown.value       // in synchronous code: try shown.wait()
        // end snippet

        saveDraft()                          // a short block of the test's task, as in synchronous code
        #expect(id.hasPrefix("notified "))
        #expect(stored.withLock { $0.last } == url.absoluteString)
        if case .async = Cache().dispatch {} else { Issue.record("the default is not .async") }
        if case .sync = Cache(dispatch: .sync(on: .thread(db))).dispatch {} else { Issue.record("not .sync") }
    }

    // MARK: Docs/Diagnostics.md (in a child process: it installs a signal handler and prints the dump)

    @Test(.exitTestOnOwnThreads) func diagnosticsIntroduction() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            // snippet: Docs/Diagnostics.md#1
            let pool = ThreadPool(name: "Thumbnails", size: 2)
            try pool.execute(label: "resize avatar 1042") { }   // the dump shows the label while it runs
            print(Diagnostics.snapshot())                    // the dump: components, threads, waits
            let json = Diagnostics.snapshot().json()         // the same for programs (Snapshot is Codable)
            let metrics = Diagnostics.prometheusText()       // serve it at /metrics
            Diagnostics.dumpOnSignal(SIGUSR1)                // `kill -USR1 <pid>` writes the dump to standard error
            // end snippet

            let decoded = try JSONDecoder().decode(Snapshot.self, from: Data(json.utf8))
            precondition(decoded.components.contains { $0.kind == "ThreadPool" && $0.name == "Thumbnails" })
            precondition(metrics.contains("threadkit_pool_threads{pool=\"Thumbnails\"}"))
        }
        let output = result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } ?? ""
        #expect(output.hasPrefix("ThreadKit dump "))
        #expect(output.contains("ThreadPool \"Thumbnails\": size=2"))
    }

    // MARK: Docs/Log.md (in child processes: they enable logging and set the delegate for the whole process)

    @Test(.exitTestOnOwnThreads) func logIntroduction() async {
        await #expect(processExitsWith: .success) {
            let changes = [1, 2, 3]

            // snippet: Docs/Log.md#1
            Log.enable(.threadPool)                 // "Render Thread3 ThreadPool: Render: collected Render Thread3, idle for 10.2 s"
            let sync = Log.Source("Sync")           // make a source once and keep it
            Log.log(sync, "pulled \(changes.count) changes")   // nothing happens: Sync is off
            // end snippet

            precondition(Log.isEnabled(.threadPool) && !Log.isEnabled(sync))
        }
    }

    @Test(.exitTestOnOwnThreads) func logOwnSources() async {
        await #expect(processExitsWith: .success) {
            let amount = 42

            // snippet: Docs/Log.md#2
            enum Billing {
                static let log = Log.Source("Billing")
            }
            Log.log(Billing.log, "charged \(amount)")
            // end snippet

            precondition(Billing.log.name == "Billing")
        }
    }

    @Test(.exitTestOnOwnThreads) func logSwiftLogAdapter() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            // snippet: Docs/Log.md#3
            final class SwiftLogDelegate: LogDelegate {
                let logger = Logger(label: "ThreadKit")
                func log(_ record: Log.Record) {
                    logger.info("\(record.message)", metadata: ["source": "\(record.source)", "thread": "\(record.threadName)"],
                                file: record.file, function: "", line: UInt(record.line))
                }
            }
            Log.delegate = SwiftLogDelegate()
            // end snippet

            let source = Log.Source("Adapter")
            Log.enable(source)
            Log.log(source, "through swift-log")
            Log.delegate = nil  // delivers what is queued, then lets the delegate go
        }
        let output = String(decoding: result?.standardOutputContent ?? [], as: UTF8.self)
        #expect(output.contains("ThreadKit info: through swift-log [source: Adapter"), "\(output)")
    }
}

/// A stand-in for swift-log's `Logger`, with the members the adapter snippet uses and their
/// signatures (swift-log is not a dependency of the package): it prints what it is given.
struct Logger: Sendable {
    struct Message: ExpressibleByStringInterpolation, Sendable {
        var text: String
        init(stringLiteral value: String) { text = value }
        init(stringInterpolation: DefaultStringInterpolation) { text = String(stringInterpolation: stringInterpolation) }
    }
    enum MetadataValue: ExpressibleByStringInterpolation, Sendable {
        case string(String)
        init(stringLiteral value: String) { self = .string(value) }
        init(stringInterpolation: DefaultStringInterpolation) { self = .string(String(stringInterpolation: stringInterpolation)) }
    }
    typealias Metadata = [String: MetadataValue]

    let label: String

    init(label: String) {
        self.label = label
    }

    func info(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        let fields = (metadata() ?? [:]).sorted { $0.key < $1.key }.map { key, value in
            if case .string(let text) = value { "\(key): \(text)" } else { key }
        }
        print("\(label) info: \(message().text) [\(fields.joined(separator: ", "))] \(file):\(line)")
    }
}
