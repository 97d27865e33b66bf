import PCastProtocol
import Testing

/// The two places a scalable stream's packets say their layers: VP9's payload descriptor
/// (RFC 9628) and AV1's dependency descriptor header extension.
@Suite("Scalable video descriptors: VP9's payload descriptor and the dependency descriptor")
struct ScalableDescriptorTests {
    /// The dependency descriptor of an L1T3 keyframe's first packet, its structure as libwebrtc
    /// describes L1T3 (templates T0 "SSS", T0 "SSS", T1 "-DS", T2 "--D", T2 "--D"; one chain;
    /// 640×480), bit by bit per appendix A.
    static let l1t3Keyframe: [UInt8] = [0x80, 0x00, 0x01, 0x80, 0x02, 0x14, 0xEA, 0xA8, 0x60, 0x41,
                                        0x4D, 0x14, 0x12, 0x20, 0x84, 0x27, 0x02, 0x7F, 0x01, 0xDF]

    static func structure() throws -> FrameDependencyStructure {
        try #require(try DependencyDescriptor(parsing: l1t3Keyframe, structure: nil).structure)
    }

    @Test("an L1T3 structure reads whole: five templates with their layers, indications and references, three decode targets at temporal layers 0, 1 and 2, one chain, the render size, and the keyframe's own fields")
    func structureReads() throws {
        let descriptor = try DependencyDescriptor(parsing: Self.l1t3Keyframe, structure: nil)
        #expect(descriptor.startsFrame && !descriptor.endsFrame && descriptor.templateID == 0 && descriptor.frameNumber == 1)
        #expect(descriptor.spatial == 0 && descriptor.temporal == 0 && descriptor.indications == [.switch, .switch, .switch])
        #expect(descriptor.activeDecodeTargets == 0b111)
        let structure = try #require(descriptor.structure)
        #expect(structure.decodeTargetCount == 3 && structure.chainCount == 1 && structure.templateIDOffset == 0)
        #expect(structure.templates.map(\.temporal) == [0, 0, 1, 2, 2] && structure.templates.allSatisfy { $0.spatial == 0 })
        #expect(structure.templates.map(\.frameDifferences) == [[], [4], [2], [1], [3]])
        #expect(structure.templates[2].indications == [.notPresent, .discardable, .switch])
        #expect(structure.decodeTargetLayers.map(\.temporal) == [0, 1, 2] && structure.decodeTargetLayers.allSatisfy { $0.spatial == 0 })
        #expect(structure.resolutions == [ViewSize(width: 640, height: 480)])
    }

    @Test("later descriptors name a template of the structure: three bytes give the frame's layer and indications (Chromium's own 01 00 7d among them); custom indications override the template's")
    func laterDescriptors() throws {
        let structure = try Self.structure()
        let middle = try DependencyDescriptor(parsing: [0xC2, 0x00, 0x03], structure: structure)
        #expect(middle.startsFrame && middle.endsFrame && middle.frameNumber == 3 && middle.structure == nil)
        #expect(middle.temporal == 1 && middle.indications == [.notPresent, .discardable, .switch] && middle.frameDifferences == [2])
        let chromium = try DependencyDescriptor(parsing: [0x01, 0x00, 0x7D], structure: structure)
        #expect(!chromium.startsFrame && !chromium.endsFrame && chromium.temporal == 0 && chromium.frameNumber == 0x7D)
        // Template 3 (T2) with custom indications: not in targets 0 and 1, a switch point of 2.
        let custom = try DependencyDescriptor(parsing: [0xC3, 0x00, 0x05, 0x20, 0x40], structure: structure)
        #expect(custom.temporal == 2 && custom.indications == [.notPresent, .notPresent, .switch] && custom.frameDifferences == [1])
    }

    @Test("malformed descriptors are refused by name: a frame before any structure, a template the structure lacks, a structure cut short")
    func malformed() throws {
        #expect(throws: DependencyDescriptor.Malformed.noStructure) { try DependencyDescriptor(parsing: [0xC2, 0x00, 0x03], structure: nil) }
        let structure = try Self.structure()
        #expect(throws: DependencyDescriptor.Malformed.unknownTemplate(9)) { try DependencyDescriptor(parsing: [0xC9, 0x00, 0x03], structure: structure) }
        #expect(throws: DependencyDescriptor.Malformed.truncated) { try DependencyDescriptor(parsing: Array(Self.l1t3Keyframe.prefix(8)), structure: nil) }
        #expect(throws: DependencyDescriptor.Malformed.truncated) { try DependencyDescriptor(parsing: [0xC2], structure: structure) }
    }

    @Test("a VP9 k-SVC keyframe's base layer: 15-bit picture id, layer indices and TL0PICIDX, and the scalability structure with three layers' sizes and a group of one picture")
    func vp9KeyframeDescriptor() throws {
        let bytes: [UInt8] = [0xAA, 0x92, 0x34, 0x00, 0x05, 0x58,
                              0x00, 0xF0, 0x00, 0x87, 0x01, 0xE0, 0x01, 0x0E, 0x03, 0xC0, 0x02, 0x1C,
                              0x01, 0x04, 0x01,
                              0x82, 0x49, 0x83]
        let descriptor = try bytes.withUnsafeBytes { try VP9Descriptor(parsing: $0) }
        #expect(descriptor.length == 21 && descriptor.pictureID == 0x1234 && descriptor.tl0PictureIndex == 5)
        #expect(descriptor.startsFrame && !descriptor.endsFrame && !descriptor.interPicturePredicted && !descriptor.flexible)
        #expect(descriptor.layers == VP9Descriptor.Layers(temporal: 0, switchingUpPoint: false, spatial: 0, interLayerDependency: false))
        let scalability = try #require(descriptor.scalability)
        #expect(scalability.spatialLayers == 3 && scalability.pictureGroupTemporalLayers == [0])
        #expect(scalability.resolutions.map { "\($0.width)×\($0.height)" } == ["240×135", "480×270", "960×540"])
        #expect(bytes.withUnsafeBytes { VP9Payload.startsKeyframe($0) })
    }

    @Test("a VP9 flexible-mode frame of an upper layer: 7-bit picture id, layer indices without TL0PICIDX, two reference differences; a fourth difference and a descriptor cut short are refused")
    func vp9FlexibleDescriptor() throws {
        let bytes: [UInt8] = [0xFD, 0x21, 0x53, 0x03, 0x04, 0x82]
        let descriptor = try bytes.withUnsafeBytes { try VP9Descriptor(parsing: $0) }
        #expect(descriptor.length == 5 && descriptor.pictureID == 0x21 && descriptor.tl0PictureIndex == nil)
        #expect(descriptor.interPicturePredicted && descriptor.flexible && descriptor.startsFrame && descriptor.endsFrame && descriptor.notReferencedByUpperLayer)
        #expect(descriptor.layers == VP9Descriptor.Layers(temporal: 2, switchingUpPoint: true, spatial: 1, interLayerDependency: true))
        #expect(throws: VP9Descriptor.Malformed.tooManyReferences) {
            try ([0xD8, 0x00, 0x03, 0x03, 0x03, 0x03] as [UInt8]).withUnsafeBytes { try VP9Descriptor(parsing: $0) }
        }
        #expect(throws: VP9Descriptor.Malformed.truncated) { try ([0xA0] as [UInt8]).withUnsafeBytes { try VP9Descriptor(parsing: $0) } }
        #expect(throws: VP9Descriptor.Malformed.truncated) { try ([0x8A, 0x05, 0x10, 0x00] as [UInt8]).withUnsafeBytes { try VP9Descriptor(parsing: $0) } }
    }

    @Test("a VP9 superframe's index lists its frames' sizes in the fewest bytes and splits back into them; a frame's header gives its coded size: a keyframe's, an inter frame's stated size (a scalable keyframe picture's upper layer), none for one that takes a reference's")
    func vp9Superframes() throws {
        let keyframe: [UInt8] = [0x82, 0x49, 0x83, 0x42, 0x40, 0x3B, 0xF0, 0x21, 0xB0] + [UInt8](repeating: 0x11, count: 291)
        let upper: [UInt8] = [0x86, 0x00, 0x40, 0x00, 0x00, 0xEF, 0x80, 0x86, 0x80] + [UInt8](repeating: 0x22, count: 69_991)
        let index = try #require(VP9Superframe.index(frameSizes: [keyframe.count, upper.count]))
        #expect(index == [0xD1, 0x2C, 0x01, 0x00, 0x70, 0x11, 0x01, 0xD1], "3-byte sizes (70,000 > 65,535), 2 frames")
        let frames = VP9Superframe.frames(in: keyframe + upper + index)
        #expect(frames.map(\.count) == [300, 70_000] && Array(frames[0]) == keyframe)
        #expect(VP9Superframe.frames(in: keyframe).count == 1, "no index: one frame")
        #expect(VP9Superframe.index(frameSizes: [5]) == nil && VP9Superframe.index(frameSizes: Array(repeating: 1, count: 9)) == nil)
        #expect(VP9Superframe.frameSize(keyframe[...]).map { "\($0.width)×\($0.height)" } == "960×540")
        #expect(VP9Superframe.frameSize(upper[...]).map { "\($0.width)×\($0.height)" } == "480×270")
        #expect(VP9Superframe.frameSize([0x86, 0x00, 0x40, 0x01][...]) == nil, "found_ref: a reference's size")
        #expect(VP9Superframe.frameSize([0x82, 0x49][...]) == nil, "cut short")
    }
}
