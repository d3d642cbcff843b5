/// The links whose step the calling thread runs, innermost first: a stack of entries on the
/// threads' own stacks, reached through one thread-local pointer.
enum RunningSteps {
    private struct Entry {
        let link: ObjectIdentifier
        let outer: UnsafeMutableRawPointer?
    }

    private static let innermost = ThreadLocalPointer()

    /// Runs `body`, the step of `link`, with the calling thread known to run it.
    static func running<R>(_ link: AnyObject, _ body: () -> R) -> R {
        var entry = Entry(link: ObjectIdentifier(link), outer: innermost.current)
        return withUnsafeMutablePointer(to: &entry) { pointer in
            innermost.current = UnsafeMutableRawPointer(pointer)
            defer { innermost.current = pointer.pointee.outer }
            return body()
        }
    }

    /// Whether the calling thread runs the step of `link` (perhaps with other steps nested inside).
    static func contains(_ link: AnyObject) -> Bool {
        let id = ObjectIdentifier(link)
        var pointer = innermost.current
        while let current = pointer {
            let entry = current.assumingMemoryBound(to: Entry.self).pointee
            if entry.link == id { return true }
            pointer = entry.outer
        }
        return false
    }
}
