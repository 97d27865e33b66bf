/// What a network does to the packets crossing it, as a value: loss (uniform or bursty), delay,
/// jitter, reordering, a bandwidth cap with a bounded queue, and an outage switch.
///
/// This kernel has no netem: the tests and benchmarks impose these with ``UDPImpairmentProxy``,
/// which runs an ``ImpairmentModel`` per direction.
///
/// ```swift
/// var profile = ImpairmentProfile()
/// profile.loss = .uniform(0.10)                       // 10 % of packets lost
/// profile.loss = .bursty(loss: 0.05, meanBurst: 4)     // 5 % lost, in bursts of 4 on average
/// profile.delay = .milliseconds(40); profile.jitter = .milliseconds(10)
/// profile.bandwidth = 500_000                          // bits per second
/// ```
public struct ImpairmentProfile: Sendable, Hashable {
    public enum Loss: Sendable, Hashable {
        case none
        /// Each packet is lost with this probability (0…1), independently of the others.
        case uniform(Double)
        /// A two-state Markov chain: losses come in bursts.
        case gilbertElliott(GilbertElliott)

        /// Bursty loss with the given long-run loss rate (0…1) and mean burst length in packets (≥ 1).
        public static func bursty(loss: Double, meanBurst: Double) -> Loss {
            .gilbertElliott(.init(loss: loss, meanBurst: meanBurst))
        }

        /// The long-run share of packets lost.
        public var rate: Double {
            switch self {
            case .none: return 0
            case .uniform(let p): return min(max(p, 0), 1)
            case .gilbertElliott(let model): return model.stationaryLoss
            }
        }
    }

    /// The Gilbert-Elliott loss model: in the good state packets are lost with `lossInGood`, in the
    /// bad state with `lossInBad`; after each packet the chain moves good → bad with probability
    /// `p` and bad → good with probability `r`.
    public struct GilbertElliott: Sendable, Hashable {
        public var p: Double
        public var r: Double
        public var lossInGood: Double
        public var lossInBad: Double

        public init(p: Double, r: Double, lossInGood: Double = 0, lossInBad: Double = 1) {
            self.p = min(max(p, 0), 1)
            self.r = min(max(r, 0), 1)
            self.lossInGood = min(max(lossInGood, 0), 1)
            self.lossInBad = min(max(lossInBad, 0), 1)
        }

        /// A chain that loses `loss` of all packets in bursts of `meanBurst` packets on average
        /// (every packet of the bad state lost, none of the good).
        public init(loss: Double, meanBurst: Double) {
            let loss = min(max(loss, 0), 0.999)
            let r = 1 / max(meanBurst, 1)
            self.init(p: loss * r / (1 - loss), r: r)
        }

        /// The long-run share of packets lost.
        public var stationaryLoss: Double {
            guard p + r > 0 else { return lossInGood }
            let bad = p / (p + r)
            return bad * lossInBad + (1 - bad) * lossInGood
        }
    }

    public var loss: Loss = .none
    /// Added to every packet.
    public var delay: Duration = .zero
    /// A further delay drawn uniformly from 0…jitter for each packet. Order is kept (a packet
    /// never overtakes the one before it) unless `reorder` says otherwise.
    public var jitter: Duration = .zero
    /// The probability that a packet is held back by `reorderDelay` and overtaken.
    public var reorder: Double = 0
    public var reorderDelay: Duration = .milliseconds(20)
    /// The link's capacity in bits per second (nil: unlimited). Packets queue behind each other;
    /// one that would wait longer than `queueLimit` is dropped (a tail-drop queue).
    public var bandwidth: Int?
    public var queueLimit: Duration = .milliseconds(250)
    /// Everything is dropped while on.
    public var outage = false

    public init(loss: Loss = .none, delay: Duration = .zero, jitter: Duration = .zero, bandwidth: Int? = nil) {
        self.loss = loss
        self.delay = delay
        self.jitter = jitter
        self.bandwidth = bandwidth
    }

    /// No impairment.
    public static let clear = ImpairmentProfile()
}

/// Runs an ``ImpairmentProfile`` over a sequence of packets: for each one, when it leaves or why it
/// is dropped. Pure and deterministic for a given generator; times are durations on any monotonic
/// clock.
///
/// ```swift
/// var model = ImpairmentModel(profile: profile, generator: SystemRandomNumberGenerator())
/// switch model.process(size: 1200, at: now) {
/// case .deliver(let at): schedule(packet, at)
/// case .drop(let reason): count(reason)
/// }
/// ```
public struct ImpairmentModel<Generator: RandomNumberGenerator> {
    public enum Decision: Sendable, Hashable {
        case deliver(at: Duration)
        case drop(DropReason)
    }

    public enum DropReason: Sendable, Hashable {
        case outage
        case loss
        /// The bandwidth cap's queue was full.
        case queueFull
    }

    public struct Counters: Sendable, Hashable {
        public var packets = 0
        public var delivered = 0
        public var lost = 0
        public var outage = 0
        public var queueFull = 0
        public var bytesDelivered = 0

        /// Packets dropped for any reason.
        public var dropped: Int { lost + outage + queueFull }
    }

    public var profile: ImpairmentProfile
    public private(set) var counters = Counters()
    private var generator: Generator
    private var inBadState = false
    /// When the bandwidth-limited link has finished sending what it holds.
    private var linkFreeAt: Duration = .zero
    /// When the last in-order packet leaves (jitter never reorders).
    private var lastDeparture: Duration = .zero

    public init(profile: ImpairmentProfile, generator: Generator) {
        self.profile = profile
        self.generator = generator
    }

    public mutating func process(size: Int, at now: Duration) -> Decision {
        counters.packets += 1
        if profile.outage {
            counters.outage += 1
            return .drop(.outage)
        }
        if isLost() {
            counters.lost += 1
            return .drop(.loss)
        }
        var departure = now
        if let bandwidth = profile.bandwidth, bandwidth > 0 {
            let start = max(now, linkFreeAt)
            if start - now > profile.queueLimit {
                counters.queueFull += 1
                return .drop(.queueFull)
            }
            let transmission = Duration.nanoseconds(Int64(size) * 8 * 1_000_000_000 / Int64(bandwidth))
            linkFreeAt = start + transmission
            departure = linkFreeAt
        }
        departure += profile.delay
        if profile.jitter > .zero {
            departure += profile.jitter * Double.random(in: 0...1, using: &generator)
        }
        if profile.reorder > 0, Double.random(in: 0..<1, using: &generator) < profile.reorder {
            departure = max(departure, lastDeparture) + profile.reorderDelay
        } else {
            departure = max(departure, lastDeparture)
            lastDeparture = departure
        }
        counters.delivered += 1
        counters.bytesDelivered += size
        return .deliver(at: departure)
    }

    private mutating func isLost() -> Bool {
        switch profile.loss {
        case .none:
            return false
        case .uniform(let p):
            return Double.random(in: 0..<1, using: &generator) < p
        case .gilbertElliott(let model):
            let lost = Double.random(in: 0..<1, using: &generator) < (inBadState ? model.lossInBad : model.lossInGood)
            let move = Double.random(in: 0..<1, using: &generator)
            inBadState = inBadState ? move >= model.r : move < model.p
            return lost
        }
    }
}

extension ImpairmentModel: Sendable where Generator: Sendable {}
