// How the soak writes sizes and times in its report lines.
import Foundation

/// "41.2 MB".
func megabytes(_ bytes: Int) -> String {
    String(format: "%.1f MB", Double(bytes) / 1_000_000)
}

/// "3:07" for 187 seconds.
func clockText(_ duration: Duration) -> String {
    let seconds = Int(duration.components.seconds)
    return String(format: "%d:%02d", seconds / 60, seconds % 60)
}
