// The tour's last step: a small service caught mid-work, and the dump that shows it.
import Foundation
import ThreadKit

enum DiagnosticsTour {
    /// Sets up a scene with something in every state — a pool thread running labelled work, a
    /// dedicated thread holding a caller in `sync`, a queue waiting out its gap, timer calls due
    /// later — prints the dump, and lets everything go.
    static func run() {
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let workers = ThreadPool(name: "Thumbnails", size: 2)
        let ledger = DedicatedThread(name: "Ledger")
        let upstream = ThrottledQueue(label: "Upstream", interval: .milliseconds(500))
        let timer = TimerThread(name: "Heartbeats")
        do {
            try workers.execute(label: "resize avatar 1042") {
                started.signal()
                release.wait()
            }
            try ledger.execute(label: "compact journal") {
                started.signal()
                release.wait()
            }
            started.wait()
            started.wait()
            // A caller blocks in sync on the busy ledger: the dump shows the edge and its holder.
            let caller = Thread {
                Thread.current.name = "checkout"
                ledger.sync { }
                started.signal()
            }
            caller.start()
            for index in 1...3 { try upstream.async(label: "sync page \(index)") { } }
            _ = try timer.schedule(after: .seconds(30), tag: "heartbeat") { }
            _ = try timer.schedule(after: .seconds(60), tag: "refresh token") { }
            Thread.sleep(forTimeInterval: 0.15)
            let snapshot = Diagnostics.snapshot(longWaitsOver: .milliseconds(100))
            // The whole process has more: the earlier steps' components, idle now. This scene's:
            var scene = snapshot
            scene.components = snapshot.components.filter { Self.scene.contains($0.name) }
            say(scene.description)
            let others = snapshot.components.count - scene.components.count
            say("  (and \(others) idle components of the earlier steps; as JSON the whole dump is \(snapshot.json(prettyPrinted: false).utf8.count) bytes, as Prometheus text \(Diagnostics.prometheusText().split(separator: "\n").count) lines)")
        } catch {
            say("  the scene could not be set up: \(error)")
        }
        release.signal()
        release.signal()
        started.wait()
        _ = upstream.cancelAll()
        _ = timer.dispose()
        workers.dispose()
        ledger.dispose()
    }

    /// The names of the scene's components.
    private static let scene: Set = ["Thumbnails", "Ledger", "Upstream", "Heartbeats"]
}
