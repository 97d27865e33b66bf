/// The Dependency Descriptor RTP header extension (AOMedia's "RTP Payload Format for AV1",
/// appendix A; carried as an RFC 8285 element): which spatial and temporal layer a frame is of,
/// and for each decode target (an operating point a receiver may decode) whether the frame
/// belongs to it and whether a receiver may switch to that target at this frame. What a relay
/// reads to forward some layers of a scalable AV1 (or VP9) stream without looking into it.
///
/// A descriptor names its frame's template by id; the templates come in a
/// ``FrameDependencyStructure`` sent with keyframes, which the reader keeps and passes to later
/// descriptors.
///
/// ```swift
/// let descriptor = try DependencyDescriptor(parsing: element, structure: latest)
/// latest = descriptor.structure ?? latest
/// if descriptor.indications[target] != .notPresent { forward() }
/// ```
public struct DependencyDescriptor: Sendable, Hashable {
    public enum Malformed: Error, Sendable, Hashable {
        /// Fewer bytes than the fields need.
        case truncated
        /// A frame named a template before any structure came.
        case noStructure
        /// The template id names no template of the structure.
        case unknownTemplate(Int)
        /// More than 64 templates, or 32 decode targets.
        case structureTooLarge
    }

    /// Whether a frame is part of a decode target, and how much the target needs it (table A.1).
    public enum Indication: UInt8, Sendable, Hashable {
        case notPresent = 0
        case discardable = 1
        /// Part of the target, and a receiver may start decoding the target here.
        case `switch` = 2
        case required = 3
    }

    public var startsFrame: Bool
    public var endsFrame: Bool
    public var templateID: Int
    public var frameNumber: UInt16
    /// The structure this descriptor carried (keyframes); nil when it named one sent earlier.
    public var structure: FrameDependencyStructure?
    /// Which decode targets the sender still produces (bit i: target i), when it said.
    public var activeDecodeTargets: UInt32?
    public var spatial: Int
    public var temporal: Int
    /// One per decode target of the structure.
    public var indications: [Indication]
    /// How many frames back each frame this one refers to is.
    public var frameDifferences: [Int]

    /// Reads a descriptor; `latest` is the structure received last, used when this one carries none.
    public init(parsing bytes: [UInt8], structure latest: FrameDependencyStructure?) throws(Malformed) {
        var reader = BitReader(bytes, cutShort: Malformed.truncated)
        startsFrame = try reader.read(1) == 1
        endsFrame = try reader.read(1) == 1
        templateID = Int(try reader.read(6))
        frameNumber = UInt16(try reader.read(16))
        var customIndications = false, customDifferences = false, customChains = false
        var structure: FrameDependencyStructure?
        if bytes.count > 3 {
            let structurePresent = try reader.read(1) == 1
            let activePresent = try reader.read(1) == 1
            customIndications = try reader.read(1) == 1
            customDifferences = try reader.read(1) == 1
            customChains = try reader.read(1) == 1
            if structurePresent { structure = try FrameDependencyStructure(&reader) }
            if activePresent {
                guard let known = structure ?? latest else { throw .noStructure }
                activeDecodeTargets = UInt32(try reader.read(known.decodeTargetCount))
            } else if let structure {
                activeDecodeTargets = structure.decodeTargetCount == 32 ? .max : (1 << UInt32(structure.decodeTargetCount)) - 1
            }
        }
        self.structure = structure
        guard let used = structure ?? latest else { throw .noStructure }
        let index = (templateID + 64 - used.templateIDOffset) % 64
        guard index < used.templates.count else { throw .unknownTemplate(templateID) }
        let template = used.templates[index]
        spatial = template.spatial
        temporal = template.temporal
        if customIndications {
            indications = try (0..<used.decodeTargetCount).map { _ throws(Malformed) in Indication(rawValue: UInt8(try reader.read(2)))! }
        } else {
            indications = template.indications
        }
        if customDifferences {
            var differences: [Int] = []
            while case let size = Int(try reader.read(2)), size != 0 {
                differences.append(Int(try reader.read(4 * size)) + 1)
            }
            frameDifferences = differences
        } else {
            frameDifferences = template.frameDifferences
        }
        if customChains { try reader.skip(8 * used.chainCount) }
    }
}

/// The templates of a scalable stream's frames (appendix A.2): each template's layer, its
/// decode target indications and references; the decode targets' layers; the chains that
/// protect them; and, when sent, each spatial layer's render size.
public struct FrameDependencyStructure: Sendable, Hashable {
    public struct Template: Sendable, Hashable {
        public var spatial: Int
        public var temporal: Int
        public var indications: [DependencyDescriptor.Indication]
        public var frameDifferences: [Int]
    }

    public var templateIDOffset: Int
    public var decodeTargetCount: Int
    public var templates: [Template]
    public var chainCount: Int
    /// The highest spatial and temporal layer of each decode target's frames.
    public var decodeTargetLayers: [(spatial: Int, temporal: Int)] {
        (0..<decodeTargetCount).map { target in
            templates.filter { $0.indications[target] != .notPresent }.reduce((spatial: 0, temporal: 0)) {
                (max($0.spatial, $1.spatial), max($0.temporal, $1.temporal))
            }
        }
    }
    /// The render size of each spatial layer, lowest first (empty when not sent).
    public var resolutions: [ViewSize]

    init(_ reader: inout BitReader<DependencyDescriptor.Malformed>) throws(DependencyDescriptor.Malformed) {
        templateIDOffset = Int(try reader.read(6))
        decodeTargetCount = Int(try reader.read(5)) + 1
        // Template layers: each next_layer_idc says where the next template's layer is.
        var layers: [(spatial: Int, temporal: Int)] = []
        var spatial = 0, temporal = 0
        while true {
            layers.append((spatial, temporal))
            guard layers.count <= 64 else { throw .structureTooLarge }
            let next = try reader.read(2)
            if next == 3 { break }
            if next == 1 { temporal += 1 }
            if next == 2 { temporal = 0; spatial += 1 }
        }
        var templates: [Template] = []
        for layer in layers {
            var indications: [DependencyDescriptor.Indication] = []
            for _ in 0..<decodeTargetCount { indications.append(DependencyDescriptor.Indication(rawValue: UInt8(try reader.read(2)))!) }
            templates.append(Template(spatial: layer.spatial, temporal: layer.temporal, indications: indications, frameDifferences: []))
        }
        for index in templates.indices {
            while try reader.read(1) == 1 { templates[index].frameDifferences.append(Int(try reader.read(4)) + 1) }
        }
        chainCount = Int(try reader.readNonSymmetric(decodeTargetCount + 1))
        if chainCount > 0 {
            for _ in 0..<decodeTargetCount { _ = try reader.readNonSymmetric(chainCount) }
            try reader.skip(4 * chainCount * templates.count)
        }
        self.templates = templates
        resolutions = []
        if try reader.read(1) == 1 {
            for _ in 0...spatial {
                let width = Int(try reader.read(16)) + 1
                let height = Int(try reader.read(16)) + 1
                resolutions.append(ViewSize(width: width, height: height))
            }
        }
    }
}

extension BitReader {
    /// `ns(n)` (AV1 §4.10.7): a value below `n` in the fewest bits.
    mutating func readNonSymmetric(_ n: Int) throws(Failure) -> UInt64 {
        var width = 0
        var x = n
        while x != 0 { x >>= 1; width += 1 }
        let m = UInt64((1 << width) - n)
        let value = try read(width - 1)
        guard value >= m else { return value }
        return (value << 1) - m + (try read(1))
    }
}
