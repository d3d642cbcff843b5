// The one seeded random source of the tests, the benchmark and the soak, so that a randomized
// run can be replayed from its seed and every program draws the same sequence from the same seed.

/// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit state advanced by a fixed odd constant and
/// mixed by two multiply-xorshift rounds. Small, fast, and good enough to pick operations, times
/// and inputs; not for cryptography.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) {
        state = seed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `true` with probability `probability`.
    public mutating func chance(_ probability: Double) -> Bool {
        Double.random(in: 0..<1, using: &self) < probability
    }

    /// A whole number of microseconds in `range`.
    public mutating func microseconds(_ range: ClosedRange<Int>) -> Duration {
        .microseconds(Int.random(in: range, using: &self))
    }

    /// A whole number of milliseconds in `range`.
    public mutating func milliseconds(_ range: ClosedRange<Int>) -> Duration {
        .milliseconds(Int.random(in: range, using: &self))
    }

    /// One of `choices`, each as likely as the weight beside it.
    public mutating func weighted<Choice>(_ choices: KeyValuePairs<Choice, Int>) -> Choice {
        let total = choices.reduce(0) { $0 + $1.value }
        var roll = Int.random(in: 0..<total, using: &self)
        for (choice, weight) in choices {
            if roll < weight { return choice }
            roll -= weight
        }
        return choices[choices.endIndex - 1].key
    }
}
