/// A VP9 payload descriptor (RFC 9628 §4.2), read whole: what a relay needs to forward some of a
/// scalable stream's layers and not others (layer indices, switching points, frame boundaries)
/// and the scalability structure a keyframe announces.
///
/// ```
///  |I|P|L|F|B|E|V|Z|  then picture ID (I), layer indices (L), TL0PICIDX (L, not F),
///                     reference differences (F and P), scalability structure (V)
/// ```
///
/// ```swift
/// let descriptor = try VP9Descriptor(parsing: payload)
/// if descriptor.startsFrame, let layers = descriptor.layers { decide(layers.spatial, layers.temporal) }
/// ```
public struct VP9Descriptor: Sendable, Hashable {
    public enum Malformed: Error, Sendable, Hashable {
        /// The payload ends before the fields its flags announce.
        case truncated
        /// Flexible mode with more than three reference differences.
        case tooManyReferences
    }

    /// Temporal and spatial layer of the frame (the L byte).
    public struct Layers: Sendable, Hashable {
        public var temporal: Int
        /// U: frames of a higher temporal layer that follow do not refer to any frame before
        /// this one of a layer above `temporal`.
        public var switchingUpPoint: Bool
        public var spatial: Int
        /// D: the frame refers to the spatial layer below in the same picture.
        public var interLayerDependency: Bool

        public init(temporal: Int, switchingUpPoint: Bool, spatial: Int, interLayerDependency: Bool) {
            self.temporal = temporal
            self.switchingUpPoint = switchingUpPoint
            self.spatial = spatial
            self.interLayerDependency = interLayerDependency
        }
    }

    /// Scalability structure (V), sent with keyframes.
    public struct ScalabilityStructure: Sendable, Hashable {
        /// Width and height of each spatial layer, lowest first (empty when Y is clear).
        public var resolutions: [ViewSize]
        public var spatialLayers: Int
        /// The temporal layer of each picture of the group of frames (G), in order.
        public var pictureGroupTemporalLayers: [Int]
    }

    /// P: the frame refers to an earlier picture (clear: a keyframe, or a layer frame that refers
    /// to the layer below only).
    public var interPicturePredicted: Bool
    /// F: flexible mode.
    public var flexible: Bool
    /// B: the first packet of a layer frame.
    public var startsFrame: Bool
    /// E: the last packet of a layer frame.
    public var endsFrame: Bool
    /// Z: no frame of a higher spatial layer of the picture refers to this one.
    public var notReferencedByUpperLayer: Bool
    public var pictureID: UInt16?
    public var layers: Layers?
    public var tl0PictureIndex: UInt8?
    public var scalability: ScalabilityStructure?
    /// Bytes the descriptor takes at the start of the payload.
    public var length: Int

    public init(parsing payload: UnsafeRawBufferPointer) throws(Malformed) {
        var reader = ByteCursor(payload)
        let flags = try reader.byte()
        interPicturePredicted = flags & 0x40 != 0
        flexible = flags & 0x10 != 0
        startsFrame = flags & 0x08 != 0
        endsFrame = flags & 0x04 != 0
        notReferencedByUpperLayer = flags & 0x01 != 0
        if flags & 0x80 != 0 {
            let first = try reader.byte()
            pictureID = first & 0x80 != 0 ? UInt16(first & 0x7F) << 8 | UInt16(try reader.byte()) : UInt16(first)
        }
        if flags & 0x20 != 0 {
            let byte = try reader.byte()
            layers = Layers(temporal: Int(byte >> 5), switchingUpPoint: byte & 0x10 != 0,
                            spatial: Int(byte >> 1 & 0x07), interLayerDependency: byte & 0x01 != 0)
            if !flexible { tl0PictureIndex = try reader.byte() }
        }
        if flexible && interPicturePredicted {
            var references = 0
            while try reader.byte() & 0x01 != 0 {  // N: another difference follows
                references += 1
                guard references < 3 else { throw .tooManyReferences }
            }
        }
        if flags & 0x02 != 0 { scalability = try Self.scalabilityStructure(&reader) }
        length = reader.offset
    }

    private static func scalabilityStructure(_ reader: inout ByteCursor) throws(Malformed) -> ScalabilityStructure {
        let head = try reader.byte()
        let spatialLayers = Int(head >> 5) + 1
        var resolutions: [ViewSize] = []
        if head & 0x10 != 0 {
            for _ in 0..<spatialLayers {
                let width = Int(try reader.byte()) << 8 | Int(try reader.byte())
                let height = Int(try reader.byte()) << 8 | Int(try reader.byte())
                resolutions.append(ViewSize(width: width, height: height))
            }
        }
        var temporal: [Int] = []
        if head & 0x08 != 0 {
            let pictures = Int(try reader.byte())
            for _ in 0..<pictures {
                let picture = try reader.byte()
                temporal.append(Int(picture >> 5))
                try reader.skip(Int(picture >> 2 & 0x03))  // R reference differences
            }
        }
        return ScalabilityStructure(resolutions: resolutions, spatialLayers: spatialLayers, pictureGroupTemporalLayers: temporal)
    }
}

/// Reads bytes in order from a buffer, failing with ``VP9Descriptor/Malformed/truncated``.
private struct ByteCursor {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    mutating func byte() throws(VP9Descriptor.Malformed) -> UInt8 {
        guard offset < bytes.count else { throw .truncated }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func skip(_ count: Int) throws(VP9Descriptor.Malformed) {
        guard offset + count <= bytes.count else { throw .truncated }
        offset += count
    }
}

/// VP9 superframes (VP9 bitstream specification, Annex B): several frames in one buffer, sizes
/// listed in an index after the last. A scalable picture's spatial layers arrive as separate
/// frames; joined without an index, a decoder such as ffmpeg's reads the first (the smallest
/// layer) and takes the rest for trailing bytes, so a recording of a k-SVC stream showed the
/// base layer at keyframes and corrupt pictures after them.
public enum VP9Superframe {
    /// The index that makes `frameSizes` (in order, each 1 byte or more) one superframe; nil for
    /// fewer than 2 frames or more than 8 (one frame needs no index; VP9 allows at most 8).
    public static func index(frameSizes: [Int]) -> [UInt8]? {
        guard (2...8).contains(frameSizes.count), let largest = frameSizes.max(), frameSizes.allSatisfy({ $0 > 0 }),
              largest <= Int(UInt32.max) else { return nil }
        let width = largest < 1 << 8 ? 1 : largest < 1 << 16 ? 2 : largest < 1 << 24 ? 3 : 4
        let marker = 0xC0 | UInt8(width - 1) << 3 | UInt8(frameSizes.count - 1)
        var index = [marker]
        for size in frameSizes {
            for byte in 0..<width { index.append(UInt8(truncatingIfNeeded: size >> (8 * byte))) }
        }
        index.append(marker)
        return index
    }
}

extension VP9Superframe {
    /// The frames of a superframe, by its index; the whole buffer as one frame when it has none
    /// (or an index that does not add up).
    public static func frames(in bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        guard let marker = bytes.last, marker & 0xE0 == 0xC0 else { return [bytes[...]] }
        let width = Int(marker >> 3 & 0x03) + 1, count = Int(marker & 0x07) + 1
        let indexSize = 2 + width * count
        guard bytes.count >= indexSize, bytes[bytes.count - indexSize] == marker else { return [bytes[...]] }
        var frames: [ArraySlice<UInt8>] = []
        var start = 0
        for frame in 0..<count {
            var size = 0
            for byte in 0..<width { size |= Int(bytes[bytes.count - indexSize + 1 + frame * width + byte]) << (8 * byte) }
            guard size > 0, start + size <= bytes.count - indexSize else { return [bytes[...]] }
            frames.append(bytes[start..<(start + size)])
            start += size
        }
        return frames
    }

    /// The coded size a frame's uncompressed header states (VP9 §6.2): a keyframe's or an
    /// intra-only frame's, or an inter frame's that names none of its references' sizes (the
    /// upper spatial layers of a scalable keyframe picture). Nil when the header says it takes a
    /// reference's size, or does not parse.
    public static func frameSize(_ frame: ArraySlice<UInt8>) -> (width: Int, height: Int)? {
        var reader = BitReader([UInt8](frame.prefix(32)), cutShort: VP9Descriptor.Malformed.truncated)
        do {
            guard try reader.read(2) == 2 else { return nil }   // frame_marker
            let profile = Int(try reader.read(1)) | Int(try reader.read(1)) << 1
            if profile == 3 { try reader.skip(1) }
            guard try reader.read(1) == 0 else { return nil }   // show_existing_frame
            let keyframe = try reader.read(1) == 0
            let shown = try reader.read(1) == 1
            let errorResilient = try reader.read(1) == 1
            func colorConfig() throws(VP9Descriptor.Malformed) {
                if profile >= 2 { try reader.skip(1) }   // ten_or_twelve_bit
                let colorSpace = try reader.read(3)
                if colorSpace != 7 {   // not CS_RGB
                    try reader.skip(1)   // color_range
                    if profile == 1 || profile == 3 { try reader.skip(3) }
                } else if profile == 1 || profile == 3 {
                    try reader.skip(1)
                }
            }
            func size() throws(VP9Descriptor.Malformed) -> (width: Int, height: Int) {
                (Int(try reader.read(16)) + 1, Int(try reader.read(16)) + 1)
            }
            if keyframe {
                guard try reader.read(24) == 0x498342 else { return nil }
                try colorConfig()
                return try size()
            }
            let intraOnly = shown ? false : try reader.read(1) == 1
            if !errorResilient { try reader.skip(2) }   // reset_frame_context
            if intraOnly {
                guard try reader.read(24) == 0x498342 else { return nil }
                if profile > 0 { try colorConfig() }
                try reader.skip(8)   // refresh_frame_flags
                return try size()
            }
            try reader.skip(8 + 3 * 4)   // refresh_frame_flags, three references' index and sign bias
            for _ in 0..<3 {
                if try reader.read(1) == 1 { return nil }   // found_ref: a reference's size
            }
            return try size()
        } catch {
            return nil
        }
    }
}
