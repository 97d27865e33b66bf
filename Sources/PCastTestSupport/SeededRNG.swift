import PCastImpairment

/// A small seeded generator (SplitMix64), so random tests draw the same values on every run.
///
/// ```swift
/// var rng = SeededRNG(seed: 42)
/// let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
/// ```
public typealias SeededRNG = SeededGenerator
