/// How every ThreadKit error words a refusal by a disposed component, so that they all read alike:
/// `"<component> '<name>' is disposed and accepts no more <things>"`.
///
/// - Parameters:
///   - component: The component's type, as `"ThreadPool"`.
///   - name: The name the component was given.
///   - things: What it no longer accepts: `"work"`, or `"calls"` for a timer.
func disposedDescription(of component: String, named name: String, accepting things: String = "work") -> String {
    "\(component) '\(name)' is disposed and accepts no more \(things)"
}
