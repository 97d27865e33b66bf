// RecordingFile without external tools: layout on disk, append rules, errors.

import Foundation
import Testing
@testable import PCastRecording

func fileBytes(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) }

/// One fragment of `seconds` of synthetic video (25 fps) and audio (20 ms) from `start` seconds.
func syntheticFragment(start: UInt64, seconds: UInt64 = 1) -> FMP4Fragment {
    let frames = Int(seconds * 25), packets = Int(seconds * 50)
    return FMP4Fragment(runs: [
        FMP4TrackRun(trackID: 1, samples: (0..<frames).map { i in
            FMP4Sample(decodeTime: start * 90_000 + UInt64(i) * 3600, duration: 3600, isSync: i == 0,
                       data: [0, 0, 0, 2, i == 0 ? 0x65 : 0x41, 0x80])
        }),
        FMP4TrackRun(trackID: 2, samples: (0..<packets).map { i in
            FMP4Sample(decodeTime: start * 48_000 + UInt64(i) * 960, duration: 960, isSync: true, data: [0xFC, 0xFF, 0xFE])
        }),
    ])
}

/// `mfhd` sequence numbers of all top-level `moof`s, in file order.
func sequenceNumbers(_ bytes: [UInt8]) -> [UInt32] {
    var offset = 0
    var sequences: [UInt32] = []
    while offset + 8 <= bytes.count {
        let size = Int(u32(bytes, offset))
        guard size >= 8 else { break }
        if u32(bytes, offset + 4) == FourCC.moof, offset + 24 <= bytes.count { sequences.append(u32(bytes, offset + 20)) }
        offset += size
    }
    return sequences
}

/// Offsets of the top-level boxes of `type`.
func topLevelOffsets(_ bytes: [UInt8], _ type: UInt32) -> [Int] {
    var offset = 0
    var found: [Int] = []
    while offset + 8 <= bytes.count {
        let size = Int(u32(bytes, offset))
        guard size >= 8 else { break }
        if u32(bytes, offset + 4) == type { found.append(offset) }
        offset += size
    }
    return found
}

struct RecordingFileTests {
    @Test func createWritesTheInitSegmentAndKeepsTheDurationUpToDate() throws {
        let path = try Scratch.directory("rf") + "/a.mp4"
        let file = try RecordingFile.create(path: path, tracks: [video, audio])
        let initSize = file.fileSize
        try file.write(syntheticFragment(start: 0))
        try file.write(syntheticFragment(start: 1))
        #expect(file.duration == .seconds(2))
        #expect(file.fragmentsWritten == 2)
        let bytes = try fileBytes(path)
        #expect(UInt64(bytes.count) == file.fileSize && file.bytesWritten == file.fileSize && file.fileSize > initSize)
        let scan = try FMP4.scan(bytes)
        for field in [scan.mvhdDuration, scan.mehdDuration] {
            let offset = Int(try #require(field).offset)
            #expect(u64(bytes, offset) == 2000)
        }
        #expect(sequenceNumbers(bytes) == [1, 2])
        try file.close()
        #expect(throws: RecordingFileError.closed) { try file.write(syntheticFragment(start: 2)) }
    }

    @Test func createReplacesAnExistingFile() throws {
        let path = try Scratch.directory("rf") + "/b.mp4"
        try Data(repeating: 0x41, count: 100_000).write(to: URL(fileURLWithPath: path))
        let file = try RecordingFile.create(path: path, tracks: [video])
        try file.close()
        let bytes = try fileBytes(path)
        #expect(bytes.count < 2000 && Array(bytes[4..<8]) == Array("ftyp".utf8))
    }

    @Test func appendContinuesTheSequenceAndReportsTheEnd() throws {
        let path = try Scratch.directory("rf") + "/c.mp4"
        let file = try RecordingFile.create(path: path, tracks: [video, audio])
        try file.write(syntheticFragment(start: 0))
        try file.write(syntheticFragment(start: 1))
        try file.close()
        let appended = try RecordingFile.append(path: path, tracks: [video, audio])
        #expect(appended.startOffset == 2_000_000_000)
        #expect(appended.warnings.isEmpty)
        #expect(appended.file.duration == .seconds(2))
        #expect(throws: RecordingFileError.self) { try appended.file.write(syntheticFragment(start: 1)) }  // overlaps
        try appended.file.write(syntheticFragment(start: 2))
        try appended.file.close()
        let bytes = try fileBytes(path)
        #expect(sequenceNumbers(bytes) == [1, 2, 3])
        let scan = try FMP4.scan(bytes)
        #expect(scan.trackEnds == [1: 270_000, 2: 144_000])
        #expect(u64(bytes, Int(try #require(scan.mehdDuration).offset)) == 3000)
    }

    @Test func appendToAMissingFileStartsANewRecording() throws {
        let path = try Scratch.directory("rf") + "/missing.mp4"
        let appended = try RecordingFile.append(path: path, tracks: [video])
        #expect(appended.startOffset == 0)
        #expect(appended.warnings == [.startedNewRecording(reason: "no such file")])
        try appended.file.close()
        #expect(try FMP4.scan(fileBytes(path)).hasMovie)
    }

    @Test func appendRejectsTracksOfAnotherKindOrTimescale() throws {
        let path = try Scratch.directory("rf") + "/d.mp4"
        try RecordingFile.create(path: path, tracks: [video, audio]).close()
        let before = try fileBytes(path)
        let opusAsTrackOne = FMP4Track(id: 1, timescale: 48_000, codec: audio.codec)
        #expect(throws: RecordingFileError.self) { try RecordingFile.append(path: path, tracks: [opusAsTrackOne]) }
        var slowVideo = video
        slowVideo.timescale = 1000
        #expect(throws: RecordingFileError.self) { try RecordingFile.append(path: path, tracks: [slowVideo]) }
        #expect(try fileBytes(path) == before)
    }

    @Test func appendDropsATrackTheRecordingLacks() throws {
        let path = try Scratch.directory("rf") + "/e.mp4"
        try RecordingFile.create(path: path, tracks: [video]).close()
        let appended = try RecordingFile.append(path: path, tracks: [video, audio])
        #expect(appended.warnings == [.trackNotInRecording(id: 2)])
        #expect(appended.file.tracks == [video])
        #expect(throws: RecordingFileError.unknownTrack(2)) { try appended.file.write(syntheticFragment(start: 0)) }
        var bigger = video
        bigger.codec = .h264(width: 640, height: 480, sps: testSPS, pps: testPPS)
        try appended.file.close()
        let again = try RecordingFile.append(path: path, tracks: [bigger])
        #expect(again.warnings == [.videoSizeChanged(id: 1, width: 640, height: 480)])
    }

    @Test func appendRefusesAFileThatIsNotARecordingAndLeavesItAlone() throws {
        let path = try Scratch.directory("rf") + "/notes.txt"
        let text = Data("these are someone's notes, not a recording\n".utf8)
        try text.write(to: URL(fileURLWithPath: path))
        #expect(throws: RecordingFileError.notARecording(path: path, reason: .notISOBMFF(found: "e ar"))) {
            try RecordingFile.append(path: path, tracks: [video])
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == text)
    }

    @Test func appendCutsOffATornFragment() throws {
        let path = try Scratch.directory("rf") + "/f.mp4"
        let file = try RecordingFile.create(path: path, tracks: [video, audio])
        try file.write(syntheticFragment(start: 0))
        let goodSize = file.fileSize
        try file.write(syntheticFragment(start: 1))
        try file.close()
        let fullSize = try fileBytes(path).count
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: goodSize + 100)
        try handle.close()
        let appended = try RecordingFile.append(path: path, tracks: [video, audio])
        #expect(appended.warnings == [.truncatedTail(bytes: 100)])
        #expect(appended.startOffset == 1_000_000_000)
        #expect(try fileBytes(path).count == Int(goodSize))
        #expect(fullSize > Int(goodSize) + 100)
        try appended.file.write(syntheticFragment(start: 1))
        try appended.file.close()
        #expect(sequenceNumbers(try fileBytes(path)) == [1, 2])
    }

    @Test func aTornMoovIsTreatedLikeCreate() throws {
        let path = try Scratch.directory("rf") + "/g.mp4"
        try RecordingFile.create(path: path, tracks: [video, audio]).close()
        let bytes = try fileBytes(path)
        try Data(bytes[0..<(bytes.count - 10)]).write(to: URL(fileURLWithPath: path))
        let appended = try RecordingFile.append(path: path, tracks: [video])
        #expect(appended.warnings == [.startedNewRecording(reason: "no complete moov")])
        #expect(appended.file.tracks == [video])
        try appended.file.close()
        #expect(try FMP4.scan(fileBytes(path)).tracks.map(\.id) == [1])
    }

    @Test func aSecondWriterIsRefusedWhileTheFirstIsOpen() throws {
        let path = try Scratch.directory("rf") + "/h.mp4"
        let file = try RecordingFile.create(path: path, tracks: [video])
        #expect(throws: RecordingFileError.busy(path: path)) { try RecordingFile.append(path: path, tracks: [video]) }
        #expect(throws: RecordingFileError.busy(path: path)) { try RecordingFile.create(path: path, tracks: [video]) }
        try file.close()
        try RecordingFile.append(path: path, tracks: [video]).file.close()
    }

    @Test func cannotOpenReportsErrno() {
        #expect(throws: RecordingFileError.cannotOpen(path: "/nonexistent-dir/x.mp4", errno: ENOENT,
                                                       message: "No such file or directory")) {
            try RecordingFile.create(path: "/nonexistent-dir/x.mp4", tracks: [video])
        }
    }
}
