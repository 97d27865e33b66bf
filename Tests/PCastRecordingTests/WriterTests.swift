// Byte-level checks of the init segment and fragment writers, and the H.264 helpers.

import Testing
@testable import PCastRecording

/// Finds the first box of `type` anywhere in `bytes` (a naive search, good enough for tests).
func boxOffset(_ bytes: [UInt8], _ type: String) -> Int? {
    let code = Array(type.utf8)
    guard bytes.count >= 8 else { return nil }
    for i in 4..<(bytes.count - 3) where Array(bytes[i..<i + 4]) == code { return i - 4 }
    return nil
}

func u32(_ bytes: [UInt8], _ offset: Int) -> UInt32 { FourCC.value(bytes, offset) }
func u64(_ bytes: [UInt8], _ offset: Int) -> UInt64 { UInt64(u32(bytes, offset)) << 32 | UInt64(u32(bytes, offset + 4)) }

struct InitSegmentTests {
    @Test func durationOffsetsPointAtTheMvhdAndMehdDurationFields() throws {
        let segment = try FMP4.initSegment(tracks: [video, audio])
        let mvhd = try #require(boxOffset(segment.bytes, "mvhd"))
        let mehd = try #require(boxOffset(segment.bytes, "mehd"))
        #expect(segment.bytes[mvhd + 8] == 1)  // version 1
        #expect(u32(segment.bytes, mvhd + 28) == 1000)  // timescale right before the duration
        #expect(segment.mvhdDurationOffset == mvhd + 32)
        #expect(segment.bytes[mehd + 8] == 1)
        #expect(segment.mehdDurationOffset == mehd + 12)
        let scan = try FMP4.scan(segment.bytes)
        #expect(scan.mvhdDuration == FMP4DurationField(offset: UInt64(mvhd + 32), byteCount: 8))
        #expect(scan.mehdDuration == FMP4DurationField(offset: UInt64(mehd + 12), byteCount: 8))
    }

    @Test func startsWithAnIso6FileTypeBox() throws {
        let bytes = try FMP4.initSegment(tracks: [video]).bytes
        #expect(Array(bytes[4..<12]) == Array("ftypiso6".utf8))
        #expect(String(decoding: bytes[16..<36], as: UTF8.self) == "iso6iso5isomdashmp41")
    }

    @Test func avcCIsBuiltFromTheSPSAndPPS() throws {
        let bytes = try FMP4.initSegment(tracks: [video]).bytes
        #expect(boxOffset(bytes, "avc3") != nil)
        let avcC = try #require(boxOffset(bytes, "avcC"))
        let expected: [UInt8] = [1, 0x64, 0x00, 0x1F, 0xFF, 0xE1, 0, 6] + testSPS + [1, 0, 4] + testPPS
        #expect(Array(bytes[avcC + 8..<avcC + 8 + expected.count]) == expected)
        #expect(u32(bytes, avcC) == UInt32(8 + expected.count))
    }

    @Test func opusEntryHasADOpsBox() throws {
        let bytes = try FMP4.initSegment(tracks: [audio]).bytes
        let entry = try #require(boxOffset(bytes, "Opus"))
        #expect(u32(bytes, entry + 8 + 16) >> 16 == 2)  // channelcount
        #expect(u32(bytes, entry + 8 + 24) == 48_000 << 16)  // samplerate 16.16
        let dOps = try #require(boxOffset(bytes, "dOps"))
        #expect(Array(bytes[dOps..<dOps + 19]) == [0, 0, 0, 19] + Array("dOps".utf8)
            + [0, 2, 0x01, 0x38, 0, 0, 0xBB, 0x80, 0, 0, 0])
    }

    @Test func sampleTablesAreEmptyAndTrexExistsPerTrack() throws {
        let bytes = try FMP4.initSegment(tracks: [video, audio]).bytes
        for type in ["stts", "stsc", "stco"] {
            let offset = try #require(boxOffset(bytes, type))
            #expect(u32(bytes, offset) == 16 && u32(bytes, offset + 12) == 0, "\(type)")
        }
        let scan = try FMP4.scan(bytes)
        #expect(scan.tracks.map(\.id) == [1, 2])
        #expect(scan.tracks.map(\.sampleEntry) == ["avc3", "Opus"])
        #expect(scan.tracks.map(\.handler) == ["vide", "soun"])
        #expect(scan.tracks.map(\.timescale) == [90_000, 48_000])
        #expect(scan.tracks[0].width == 320 && scan.tracks[0].height == 240 && scan.tracks[1].channels == 2)
        #expect(scan.completeEnd == UInt64(bytes.count) && scan.fragmentCount == 0)
    }

    @Test func rejectsInvalidTracks() {
        #expect(throws: FMP4Error.self) { try FMP4.initSegment(tracks: []) }
        #expect(throws: FMP4Error.self) { try FMP4.initSegment(tracks: [video, video]) }
        var short = video
        short.codec = .h264(width: 320, height: 240, sps: [0x67, 0x42], pps: testPPS)
        #expect(throws: FMP4Error.self) { try FMP4.initSegment(tracks: [short]) }
        var surround = audio
        surround.codec = .opus(channels: 6, sampleRate: 48_000, preSkip: 312)
        #expect(throws: FMP4Error.self) { try FMP4.initSegment(tracks: [surround]) }
    }
}

struct FragmentWriterTests {
    func sample(_ t: UInt64, _ d: UInt32, sync: Bool, _ data: [UInt8], cto: Int32 = 0) -> FMP4Sample {
        FMP4Sample(decodeTime: t, compositionOffset: cto, duration: d, isSync: sync, data: data)
    }

    @Test func trunDataOffsetsPointAtEachTracksSamplesInTheMdat() throws {
        let bytes = try FMP4.fragment(sequence: 7, runs: [
            FMP4TrackRun(trackID: 1, samples: [sample(100, 10, sync: true, [1, 1, 1]), sample(110, 10, sync: false, [2, 2])]),
            FMP4TrackRun(trackID: 2, samples: [sample(50, 5, sync: true, [3])]),
            FMP4TrackRun(trackID: 3, samples: []),  // left out
        ])
        let moofSize = Int(u32(bytes, 0))
        #expect(u32(bytes, moofSize + 4) == FourCC.mdat)
        #expect(Array(bytes[(moofSize + 8)...]) == [1, 1, 1, 2, 2, 3])
        let mfhd = try #require(boxOffset(bytes, "mfhd"))
        #expect(u32(bytes, mfhd + 12) == 7)
        var trafs: [Int] = []
        var search = 0
        while let next = boxOffset(Array(bytes[search...]), "trun") { trafs.append(search + next); search += next + 8 }
        #expect(trafs.count == 2)
        #expect(bytes[trafs[0] + 8] == 1)  // version 1: signed composition offsets
        #expect(u32(bytes, trafs[0] + 8) & 0xFFFFFF == 0xF01)
        #expect(Int(u32(bytes, trafs[0] + 16)) == moofSize + 8)
        #expect(Int(u32(bytes, trafs[1] + 16)) == moofSize + 8 + 5)
        // sample flags: sync = depends on none; non-sync = depends on others + non-sync bit
        #expect(u32(bytes, trafs[0] + 20 + 8) == 0x0200_0000)
        #expect(u32(bytes, trafs[0] + 36 + 8) == 0x0101_0000)
        let tfdt = try #require(boxOffset(bytes, "tfdt"))
        #expect(bytes[tfdt + 8] == 1 && u64(bytes, tfdt + 12) == 100)
        let tfhd = try #require(boxOffset(bytes, "tfhd"))
        #expect(u32(bytes, tfhd + 8) == 0x02_0000)  // default-base-is-moof
    }

    @Test func negativeCompositionOffsetsAreWrittenSigned() throws {
        let bytes = try FMP4.fragment(sequence: 1, runs: [
            FMP4TrackRun(trackID: 1, samples: [sample(0, 10, sync: true, [1], cto: -3)]),
        ])
        let trun = try #require(boxOffset(bytes, "trun"))
        #expect(Int32(bitPattern: u32(bytes, trun + 32)) == -3)
    }

    @Test func rejectsSamplesThatDoNotFollowEachOther() {
        #expect(throws: FMP4Error.self) {
            try FMP4.fragment(sequence: 1, runs: [FMP4TrackRun(trackID: 1, samples: [
                sample(0, 10, sync: true, [1]), sample(11, 10, sync: false, [2]),
            ])])
        }
    }
}

struct H264Tests {
    let au: [UInt8] = [0, 0, 0, 1, 0x09, 0x10,  // AUD, 4-byte start code
                       0, 0, 1, 0x67, 0x64, 0x00, 0x1F, 0x00,  // SPS, 3-byte start code, trailing zero
                       0, 0, 0, 1, 0x68, 0xEB,  // PPS
                       0, 0, 1, 0x65, 0x88, 0x84, 0x00, 0x03, 0x01]  // IDR slice
    @Test func splitsAnnexBIntoNALUnits() {
        let units = H264.nalUnits(annexB: au).map(Array.init)
        #expect(units == [[0x09, 0x10], [0x67, 0x64, 0x00, 0x1F], [0x68, 0xEB], [0x65, 0x88, 0x84, 0x00, 0x03, 0x01]])
    }

    @Test func convertsToFourByteLengthPrefixes() {
        #expect(H264.lengthPrefixed(annexB: au) == [0, 0, 0, 2, 0x09, 0x10, 0, 0, 0, 4, 0x67, 0x64, 0x00, 0x1F,
                                                   0, 0, 0, 2, 0x68, 0xEB, 0, 0, 0, 6, 0x65, 0x88, 0x84, 0x00, 0x03, 0x01])
        #expect(H264.lengthPrefixed(annexB: [1, 2, 3]) == [])
        #expect(H264.lengthPrefixed(annexB: []) == [])
        #expect(H264.lengthPrefixed(annexB: [0, 0, 1]) == [])
    }

    @Test func extractsParameterSetsAndFindsIDR() {
        let sets = H264.parameterSets(annexB: au)
        #expect(sets.sps == [0x67, 0x64, 0x00, 0x1F])
        #expect(sets.pps == [0x68, 0xEB])
        #expect(H264.containsIDR(annexB: au))
        #expect(!H264.containsIDR(annexB: [0, 0, 1, 0x41, 0x9A]))
        #expect(H264.parameterSets(annexB: [0, 0, 1, 0x41]) == H264.ParameterSets(sps: nil, pps: nil))
    }
}

struct TimeTests {
    @Test func rescalesWithoutOverflow() {
        #expect(FMP4Time.ticks(40_000_000, timescale: 90_000) == 3600)
        #expect(FMP4Time.nanoseconds(960, timescale: 48_000) == 20_000_000)
        #expect(FMP4Time.ticks(UInt64.max, timescale: 90_000) == 1_660_206_966_633_860)
        #expect(FMP4Time.nanoseconds(UInt64.max, timescale: 1) == UInt64.max)  // saturates
        #expect(FMP4Time.rescale(5, multiplier: 1, divisor: 0) == UInt64.max)
    }
}
