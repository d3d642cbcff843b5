import Foundation
import Synchronization

/// Per-source debug logging for ThreadKit and for code that uses it.
///
/// Every source is off until enabled, and a call on a disabled source costs one atomic load: the
/// message is an autoclosure that is never evaluated. Records go to ``delegate`` one at a time, in
/// the order they were logged, or to standard error when no delegate is set.
///
/// ```swift
/// let billing = Log.Source("Billing")   // store a source once…
/// Log.enable(billing)
/// Log.log(billing, "charged \(amount)")  // …and log to it; a disabled call is one atomic load
/// Log.enable(.threadPool)               // see the pool's threads come and go
/// ```
///
/// Delivery is bounded. A thread that logs while nobody is delivering delivers its own record and
/// at most 100 more that others queued meanwhile; what is left goes on in a delivery thread,
/// "ThreadKit Log", started when needed. At most 32,768 records wait for delivery: beyond that,
/// records are dropped and counted, and a record of the same source, `dropped <count> records: …`,
/// takes their place in the queue once there is room again.
public enum Log {
    /// Turns logging on for `source`.
    public static func enable(_ source: Source) {
        source.flag.isOn.store(true, ordering: .relaxed)
    }

    /// Turns logging off for `source`.
    public static func disable(_ source: Source) {
        source.flag.isOn.store(false, ordering: .relaxed)
    }

    /// Turns logging on for every source, including sources created later.
    public static func enableAll() {
        SourceRegistry.shared.setAll(true)
    }

    /// Turns logging off for every source, and for sources created later.
    public static func disableAll() {
        SourceRegistry.shared.setAll(false)
    }

    /// Whether records of `source` are delivered.
    @inlinable
    public static func isEnabled(_ source: Source) -> Bool {
        source.flag.isOn.load(ordering: .relaxed)
    }

    /// Where records go; `nil`, the default, writes them to standard error as
    /// `<thread name> <source name>: <message>`, one line each (control characters escaped).
    ///
    /// The delegate is called on the thread that logged, or on another thread that is delivering at
    /// the same moment (another logging thread, or ThreadKit's delivery thread); it is never called
    /// by two threads at once, and never while ThreadKit holds a lock.
    ///
    /// A record goes to the delegate that was in force when it was logged. Setting a new delegate
    /// therefore waits until every record logged before has been delivered to the delegate it was
    /// logged under, and until that delegate's current call has returned: once the setter returns,
    /// the delegate it replaced is never called again, and records logged after it go to the new
    /// one. Don't set the delegate while holding a lock that the old delegate's `log(_:)` takes.
    ///
    /// Set from inside a delegate's `log(_:)` (or from a `deinit` that runs while a record is being
    /// delivered), the setter cannot wait for the delivery it is part of: it returns at once, the
    /// current call finishes, and records already queued for the old delegate are still delivered to
    /// it, in order, before records logged afterwards reach the new one.
    ///
    /// The replaced delegate is released after the setter has let go of every lock, so its `deinit`
    /// may log (to the new delegate).
    public static var delegate: (any LogDelegate)? {
        get { LogDelivery.shared.delegate }
        set { LogDelivery.shared.setDelegate(newValue) }
    }

    /// Logs `message` for `source` if the source is enabled.
    ///
    /// - Parameters:
    ///   - source: Who is logging; nothing happens unless it is enabled.
    ///   - message: The text, evaluated only when the source is enabled.
    ///   - file: The file of the call, filled in for you.
    ///   - line: The line of the call, filled in for you.
    @inlinable
    public static func log(
        _ source: Source, _ message: @autoclosure () -> String,
        file: String = #fileID, line: Int = #line
    ) {
        guard source.flag.isOn.load(ordering: .relaxed) else { return }
        deliver(source, message(), file: file, line: line)
    }

    @usableFromInline
    static func deliver(_ source: Source, _ message: String, file: String, line: Int) {
        let record = Record(
            source: source, message: message, threadName: NamedThread.currentName(),
            date: Date(), file: file, line: line)
        LogDelivery.shared.deliver(record)
    }
}

extension Log {
    /// A named origin of log records, switched on and off as a whole.
    ///
    /// Two sources with the same name are the same source. ThreadKit's own parts log to
    /// ``threadPool``, ``timer``, ``throttle`` and ``urlDispatcher``; make your own with
    /// `Log.Source("Name")`, best once, in a `static let` or a stored property: then a call on a
    /// disabled source is a single atomic load. Making one per call works too, and takes no lock
    /// for a name already in use, but it looks the name up each time.
    public struct Source: Hashable, Sendable, CustomStringConvertible {
        /// The name printed before each message.
        public let name: String

        /// The switch of every source of this name. Not reference counted: the registry keeps every
        /// switch for the life of the process.
        @usableFromInline
        unowned(unsafe) let flag: SourceFlag

        /// The source called `name`, created on first use.
        ///
        /// A name already in use is found without taking a lock.
        public init(_ name: String) {
            self.name = name
            self.flag = SourceRegistry.shared.flag(for: name)
        }

        /// ``ThreadPool``: threads created and collected, pools disposed.
        public static let threadPool = Source("ThreadPool")
        /// ``TimerThread``: timers started and stopped, calls that fired more than 10 ms late.
        public static let timer = Source("TimerThread")
        /// ``ThrottledQueue``: gaps waited, pauses and resumes.
        public static let throttle = Source("ThrottledQueue")
        /// The URL dispatcher: requests queued, started and timed out.
        public static let urlDispatcher = Source("URLDispatcher")

        /// The source's name.
        public var description: String { name }

        /// Whether both are the source of one name (and so share one switch).
        public static func == (lhs: Source, rhs: Source) -> Bool { lhs.flag === rhs.flag }

        /// Hashes the name.
        public func hash(into hasher: inout Hasher) { hasher.combine(name) }
    }

    /// One logged message, as the delegate receives it.
    public struct Record: Sendable {
        /// The source that logged it.
        public let source: Source
        /// The message text.
        public let message: String
        /// The name of the thread that logged it.
        public let threadName: String
        /// When it was logged (wall clock, for display).
        public let date: Date
        /// The file that logged it, as `#fileID`.
        public let file: String
        /// The line that logged it.
        public let line: Int
    }
}

/// Receives ThreadKit's log records; set one as ``Log/delegate`` to route records to your own logger.
///
/// Records arrive one at a time, never from two threads at once, in the order they were logged,
/// and never while ThreadKit holds a lock. A delegate may itself log: that record is delivered
/// after the current call returns. It may also set ``Log/delegate``; see there what happens to the
/// records still queued for it.
public protocol LogDelegate: AnyObject, Sendable {
    /// Handles one record.
    func log(_ record: Log.Record)
}
