import PCastProtocol

// Scalable video through the relay (VP9 with layer indices, AV1 with a dependency descriptor):
// one RTP stream whose frames belong to spatial and temporal layers. Each viewer is sent the
// layers its budget allows, the others dropped, and renumbered so it sees no gap.

/// A viewer's operating point: the highest spatial and temporal layer it is sent.
struct LayerPoint: Sendable, Hashable, CustomStringConvertible {
    var spatial: Int
    var temporal: Int

    /// Every spatial layer at the full frame rate first, then the base layer at lower rates: a
    /// smaller picture at the full rate before a choppier one, as a viewer of a call would choose.
    static let ladder = [LayerPoint(spatial: 2, temporal: 2), LayerPoint(spatial: 1, temporal: 2), LayerPoint(spatial: 0, temporal: 2),
                         LayerPoint(spatial: 0, temporal: 1), LayerPoint(spatial: 0, temporal: 0)]

    /// Whether a frame of `spatial`, `temporal` is part of this point (VP9's layers nest).
    func contains(spatial: Int, temporal: Int) -> Bool { spatial <= self.spatial && temporal <= self.temporal }

    /// `S1T2`: spatial layer 1 and below, temporal layer 2 and below.
    var description: String { "S\(spatial)T\(temporal)" }
}

/// One packet of a scalable video, read once as it arrives (``ScalableTrack/read(_:descriptor:now:)``).
struct ScalableLayers: Sendable, Equatable {
    var spatial: Int
    var temporal: Int
    /// The first and last packet of its layer frame.
    var startsFrame: Bool
    var endsFrame: Bool
    /// The first packet of a keyframe: a viewer can start at it, and move to any layer.
    var startsKeyframe: Bool
    /// VP9: the frame refers to an earlier picture (P).
    var interPicture = true
    /// VP9: a switching-up point (U): a viewer of the layers below may add this temporal layer here.
    var switchingUp = false
    /// VP9: a frame of a higher spatial layer of its picture refers to this one (Z clear). A
    /// k-SVC stream's upper layers refer to the ones below at keyframes only: otherwise a viewer
    /// of an upper layer is sent that layer alone (GStreamer's depayloader would take its first
    /// packet, without inter-layer dependency, for a new picture and drop the rest).
    var referencedAbove = true
    /// AV1: the points of ``LayerPoint/ladder`` whose decode target the frame is part of, and
    /// those a viewer may switch to at it, worked out once from the descriptor's indications so
    /// that no viewer's decision needs the structure.
    var decodeTargets: DecodeTargets?

    /// Sets of ``LayerPoint/ladder``'s points: bit i, the ladder's point i.
    struct DecodeTargets: Sendable, Equatable {
        var partOf: UInt8 = 0
        var switchable: UInt8 = 0
    }

    /// What a packet whose layers could not be read is taken for: the middle of a base-layer frame.
    static let unread = ScalableLayers(spatial: 0, temporal: 0, startsFrame: false, endsFrame: false, startsKeyframe: false)

    /// Whether the frame is sent to a viewer at `point`: AV1's by its decode target; VP9's when
    /// its layers are within the point's, and below its spatial layer only when a frame above
    /// refers to it.
    func isSent(at point: LayerPoint) -> Bool {
        if let targets = decodeTargets, let index = LayerPoint.ladder.firstIndex(of: point) { return targets.partOf & 1 << index != 0 }
        guard point.contains(spatial: spatial, temporal: temporal) else { return false }
        return spatial == point.spatial || referencedAbove
    }

    /// The point a viewer at `current` moving to `target` can be at from the frame this packet
    /// starts (nil: no move here). A keyframe allows any; AV1 moves where the target's indication
    /// is `switch`; VP9 adds the next spatial layer at a frame of it that refers to no earlier
    /// picture, and a temporal layer at its switching-up point.
    func switchPoint(from current: LayerPoint, toward target: LayerPoint) -> LayerPoint? {
        guard startsFrame else { return nil }
        if startsKeyframe { return target }
        if let targets = decodeTargets {
            guard let index = LayerPoint.ladder.firstIndex(of: target), targets.switchable & 1 << index != 0 else { return nil }
            return target
        }
        var next = current
        if spatial == current.spatial + 1, spatial <= target.spatial, !interPicture { next.spatial = spatial }
        if switchingUp, temporal > current.temporal, temporal <= target.temporal, spatial <= next.spatial { next.temporal = temporal }
        return next == current ? nil : next
    }
}

/// What the relay knows of a scalable track: the structure its descriptors refer to (AV1), each
/// layer's size when announced, and how much each layer carries (for viewers' choices).
struct ScalableTrack: Sendable {
    let codec: VideoPayload
    /// AV1: the latest frame dependency structure (sent with keyframes).
    private(set) var structure: FrameDependencyStructure?
    /// Width and height of each spatial layer, lowest first, when the publisher announced them.
    private(set) var resolutions: [ViewSize] = []
    /// Bytes per layer (spatial × 4 + temporal), measured over one-second windows.
    private var meters = [RateMeter](repeating: RateMeter(), count: 16)
    /// Descriptors that did not parse (a frame before its structure, a malformed element).
    private(set) var unreadable = 0

    init?(codec: VideoPayload?) {
        guard let codec, codec == .vp9 || codec == .av1 else { return nil }
        self.codec = codec
    }

    /// The layers of a plain RTP packet: VP9's from its payload descriptor, AV1's from its
    /// dependency descriptor element (`descriptor`, taken from the header extension before it
    /// was stripped). Nil when the packet says nothing of layers (a VP9 stream without layer
    /// indices, AV1 without the extension): it goes to every viewer.
    mutating func read(_ packet: [UInt8], descriptor: [UInt8]?, now: UInt64) -> ScalableLayers? {
        let layers: ScalableLayers? = packet.withUnsafeBytes { bytes in
            guard let layout = try? RTPPacketLayout(parsing: bytes) else { return nil }
            let payload = UnsafeRawBufferPointer(rebasing: bytes[layout.payloadRange])
            switch codec {
            case .vp9: return readVP9(payload)
            case .av1: return descriptor.flatMap { readAV1($0, keyframe: AV1Payload.startsKeyframe(payload)) }
            default: return nil
            }
        }
        if let layers { meters[min(layers.spatial, 3) * 4 + min(layers.temporal, 3)].add(packet.count, now: now) }
        return layers
    }

    private mutating func readVP9(_ payload: UnsafeRawBufferPointer) -> ScalableLayers? {
        guard let descriptor = try? VP9Descriptor(parsing: payload) else {
            unreadable += 1
            return nil
        }
        if let scalability = descriptor.scalability, !scalability.resolutions.isEmpty {
            resolutions = scalability.resolutions
        }
        guard let layers = descriptor.layers else { return nil }
        return ScalableLayers(spatial: layers.spatial, temporal: layers.temporal, startsFrame: descriptor.startsFrame,
                              endsFrame: descriptor.endsFrame,
                              startsKeyframe: descriptor.startsFrame && !descriptor.interPicturePredicted && layers.spatial == 0,
                              interPicture: descriptor.interPicturePredicted, switchingUp: layers.switchingUpPoint,
                              referencedAbove: !descriptor.notReferencedByUpperLayer)
    }

    private mutating func readAV1(_ element: [UInt8], keyframe: Bool) -> ScalableLayers? {
        guard let descriptor = try? DependencyDescriptor(parsing: element, structure: structure) else {
            unreadable += 1
            return nil
        }
        if let new = descriptor.structure {
            structure = new
            if !new.resolutions.isEmpty { resolutions = new.resolutions }
        }
        var layers = ScalableLayers(spatial: descriptor.spatial, temporal: descriptor.temporal, startsFrame: descriptor.startsFrame,
                                    endsFrame: descriptor.endsFrame, startsKeyframe: keyframe && descriptor.startsFrame)
        var targets = ScalableLayers.DecodeTargets()
        for (index, point) in LayerPoint.ladder.enumerated() {
            guard let target = decodeTarget(point), target < descriptor.indications.count else { continue }
            if descriptor.indications[target] != .notPresent { targets.partOf |= 1 << index }
            if descriptor.indications[target] == .switch { targets.switchable |= 1 << index }
        }
        layers.decodeTargets = targets
        return layers
    }

    /// AV1: the decode target a point stands for: the best whose layers it contains (nil: no
    /// structure yet, or none fits).
    func decodeTarget(_ point: LayerPoint) -> Int? {
        guard let structure else { return nil }
        var best: (index: Int, layers: LayerPoint)?
        for (index, layers) in structure.decodeTargetLayers.enumerated() {
            let candidate = LayerPoint(spatial: layers.spatial, temporal: layers.temporal)
            guard point.contains(spatial: candidate.spatial, temporal: candidate.temporal) else { continue }
            if best.map({ (candidate.spatial, candidate.temporal) > ($0.layers.spatial, $0.layers.temporal) }) ?? true {
                best = (index, candidate)
            }
        }
        return best?.index
    }

    /// Bits per second a viewer at `point` is sent (the layers it contains), over the latest window.
    func rate(of point: LayerPoint, now: UInt64) -> Int {
        var total = 0
        for spatial in 0...min(point.spatial, 3) {
            for temporal in 0...min(point.temporal, 3) { total += meters[spatial * 4 + temporal].rate(now: now) }
        }
        return total
    }

    /// The size of a point's picture, when announced.
    func size(of point: LayerPoint) -> ViewSize? {
        resolutions.isEmpty ? nil : resolutions[min(point.spatial, resolutions.count - 1)]
    }
}

/// Which layers of a scalable video one viewer is sent, frame by frame, and its numbering.
///
/// - A viewer starts at a keyframe (nothing before it decodes).
/// - It moves *down* at once, at the next picture (a frame cut short would decode as a corrupt
///   picture; a picture's frames share a timestamp).
/// - It moves *up* at a switch point of the layer it moves to (``ScalableTrack/switchPoint(_:from:toward:)``);
///   a spatial layer of a k-SVC stream has one only at keyframes, which the router asks for.
/// - The last packet of the highest spatial layer it is sent carries the marker bit (the
///   publisher sets it on the picture's last layer, which this viewer may not get).
///
/// ```swift
/// var forwarder = ScalableForwarder(target: LayerPoint(spatial: 0, temporal: 2))
/// if let (sequence, marker) = forwarder.forward(layers, sequence: 9, timestamp: 3000, marker: false).sent { send() }
/// ```
struct ScalableForwarder: Sendable {
    var target: LayerPoint
    /// The point sent now; nil until a keyframe.
    private(set) var current: LayerPoint?
    /// The frame in progress and whether it is sent (its later packets follow its first's fate).
    private var frame: (timestamp: UInt32, spatial: Int, sent: Bool)?
    private var picture: UInt32?
    private(set) var numbering = SequenceRenumbering()
    private(set) var switches = 0

    init(target: LayerPoint) {
        self.target = target
    }

    /// What became of one packet: the sequence number and marker bit it is sent with (nil: not
    /// sent), and whether the viewer's point changed at it (`switched`: a move, not its start).
    struct Outcome {
        var sent: (sequence: UInt16, marker: Bool)?
        var moved = false
        var switched = 0
    }

    /// One packet of the stream, in the order it came.
    mutating func forward(_ layers: ScalableLayers, sequence: UInt16, timestamp: UInt32, marker: Bool) -> Outcome {
        let before = current, switchesBefore = switches
        var outcome = Outcome(sent: forwarding(layers, sequence: sequence, timestamp: timestamp, marker: marker))
        outcome.moved = current != before
        outcome.switched = switches - switchesBefore
        return outcome
    }

    private mutating func forwarding(_ layers: ScalableLayers, sequence: UInt16, timestamp: UInt32, marker: Bool) -> (sequence: UInt16, marker: Bool)? {
        let inOrder = numbering.isNewest(sequence)
        if inOrder {
            if current == nil, layers.startsKeyframe {
                current = target
            } else if let point = current, picture != timestamp {
                // A new picture: a move down happens here, whole pictures at a time.
                let lower = LayerPoint(spatial: min(point.spatial, target.spatial), temporal: min(point.temporal, target.temporal))
                if lower != point { current = lower; switches += 1 }
            }
            picture = timestamp
            if let point = current, point != target, let next = layers.switchPoint(from: point, toward: target) {
                current = next
                switches += 1
            }
        }
        let sent: Bool
        if let frame, frame.timestamp == timestamp, frame.spatial == layers.spatial, !layers.startsFrame {
            sent = frame.sent
        } else {
            sent = current.map { layers.isSent(at: $0) } ?? false
            if layers.startsFrame { frame = (timestamp, layers.spatial, sent) }
        }
        guard sent, let point = current else {
            numbering.drop(sequence)
            return nil
        }
        let marks = marker || layers.endsFrame && layers.spatial == point.spatial
        guard let outgoing = numbering.forward(sequence, marker: marks) else { return nil }
        return (outgoing, marks)
    }
}

/// A viewer's sequence numbers when some packets are not sent to it: each sent packet is numbered
/// its own number less the packets dropped before it, so the viewer sees no gap. A packet that
/// never came keeps its place (the viewer sees the loss and asks for it); a packet of a dropped
/// layer that comes after a later one leaves that place empty (rare: the relay reorders nothing).
/// Remembers what it sent, to answer NACKs in the viewer's numbering.
struct SequenceRenumbering: Sendable {
    private var highest: UInt16?
    private var dropped: UInt16 = 0
    /// The latest dropped packets' own numbers, oldest first (a late packet is numbered by the
    /// drops before it only).
    private var drops: [UInt16] = []
    private var sent: [Sent?] = []

    struct Sent: Sendable {
        var outgoing: UInt16
        var original: UInt16
        var marker: Bool
    }

    static let remembered = 1024
    static let rememberedDrops = 256

    /// Whether `sequence` is later than every packet seen (nothing seen yet counts).
    func isNewest(_ sequence: UInt16) -> Bool {
        highest.map { Int16(bitPattern: sequence &- $0) > 0 } ?? true
    }

    mutating func drop(_ sequence: UInt16) {
        guard isNewest(sequence) else { return }
        highest = sequence
        dropped &+= 1
        drops.append(sequence)
        if drops.count > Self.rememberedDrops { drops.removeFirst(drops.count - Self.rememberedDrops) }
    }

    /// The number `sequence` is sent as; nil for a late packet older than what is remembered.
    mutating func forward(_ sequence: UInt16, marker: Bool) -> UInt16? {
        var shift = dropped
        if isNewest(sequence) {
            highest = sequence
        } else {
            let later = drops.reversed().prefix { Int16(bitPattern: $0 &- sequence) > 0 }.count
            guard later < drops.count || drops.count < Self.rememberedDrops,
                  let highest, Int16(bitPattern: highest &- sequence) < Int16(Self.remembered / 2) else { return nil }
            shift = dropped &- UInt16(later)
        }
        let outgoing = sequence &- shift
        if sent.isEmpty { sent = [Sent?](repeating: nil, count: Self.remembered) }
        sent[Int(outgoing) % Self.remembered] = Sent(outgoing: outgoing, original: sequence, marker: marker)
        return outgoing
    }

    /// The own number and marker of the packet sent as `outgoing`; nil when it was not sent (or
    /// is no longer remembered).
    func original(ofSent outgoing: UInt16) -> Sent? {
        guard !sent.isEmpty, let entry = sent[Int(outgoing) % Self.remembered], entry.outgoing == outgoing else { return nil }
        return entry
    }
}
