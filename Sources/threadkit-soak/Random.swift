// Seeded randomness for the drivers: each driver has its own generator, so a run's seed says
// how every driver chose (though thread timing still makes each run its own).

/// SplitMix64: fast, small state, good enough to pick operations.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `true` with probability `probability`.
    mutating func chance(_ probability: Double) -> Bool {
        Double.random(in: 0..<1, using: &self) < probability
    }

    /// A whole number of microseconds in `range`.
    mutating func microseconds(_ range: ClosedRange<Int>) -> Duration {
        .microseconds(Int.random(in: range, using: &self))
    }

    /// A whole number of milliseconds in `range`.
    mutating func milliseconds(_ range: ClosedRange<Int>) -> Duration {
        .milliseconds(Int.random(in: range, using: &self))
    }

    /// One of `choices`, each as likely as the weight beside it.
    mutating func weighted<Choice>(_ choices: KeyValuePairs<Choice, Int>) -> Choice {
        let total = choices.reduce(0) { $0 + $1.value }
        var roll = Int.random(in: 0..<total, using: &self)
        for (choice, weight) in choices {
            if roll < weight { return choice }
            roll -= weight
        }
        return choices[choices.endIndex - 1].key
    }
}
