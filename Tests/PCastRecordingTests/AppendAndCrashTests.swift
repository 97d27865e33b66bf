// Append after an interruption, torn writes and a real kill -9, checked with real players.

import Foundation
import Testing
@testable import PCastRecording
#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized)
struct AppendAndCrashTests {
    let frame = 0.04
    /// Part 2's source clock: far from part 1's, to prove the new part is rebased.
    let restartedClock: UInt64 = 1_000_000_000_000

    /// Checks a recording of `frames` video frames at 25 fps (and `packets` Opus packets) in
    /// every player: duration, frame counts, continuous decode timestamps.
    func expectContinuous(_ path: String, frames: Int, packets: Int,
                          sourceLocation: SourceLocation = #_sourceLocation) throws {
        let seconds = Double(frames) * frame
        let discovery = try Players.discover(path)
        #expect(abs(discovery.seconds - seconds) <= frame, "\(discovery.output)", sourceLocation: sourceLocation)
        #expect(discovery.width == 320 && discovery.height == 240, sourceLocation: sourceLocation)
        let decoded = try Players.gstDecode(path)
        #expect(decoded.videoFrames == frames, sourceLocation: sourceLocation)
        #expect(decoded.audioBuffers == packets, sourceLocation: sourceLocation)
        #expect(decoded.videoTimestamps == (0..<frames).map { UInt64($0) * 40_000_000 }, sourceLocation: sourceLocation)
        let sequences = sequenceNumbers(try fileBytes(path))
        #expect(sequences == Array(1...UInt32(sequences.count)), sourceLocation: sourceLocation)
        guard Players.hasFFprobe else { return }
        #expect(abs(try Players.ffprobeDuration(path) - seconds) <= frame, sourceLocation: sourceLocation)
        #expect(try Players.ffprobeFrames(path, stream: "v:0") == frames, sourceLocation: sourceLocation)
        let dts = try Players.ffprobePacketDTS(path, stream: "v:0")
        #expect(dts == (0..<frames).map { Int64($0) * 3600 }, sourceLocation: sourceLocation)
        let audioDTS = try Players.ffprobePacketDTS(path, stream: "a:0")
        #expect(audioDTS == (0..<packets).map { Int64($0) * 960 }, sourceLocation: sourceLocation)
        try expectCleanFFmpegDecode(path, sourceLocation: sourceLocation)
    }

    @Test func appendedPartContinuesTheTimelineWithoutAGap() throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("append") + "/append.mp4"
        let tracks = [media.videoTrack, media.audioTrack]
        let first = try Recorder.record(path, tracks: tracks,
                                        Part(video: Array(media.video.prefix(50)), audio: Array(media.audio.prefix(100))))
        #expect(first.durationNanoseconds == 2_000_000_000)
        let second = try Recorder.record(path, tracks: tracks,
                                         Part(video: media.video, audio: media.audio, shift: restartedClock),
                                         append: true)
        #expect(second.startOffset == 2_000_000_000)
        #expect(second.warnings.isEmpty)
        #expect(second.durationNanoseconds == 5_000_000_000)
        try expectContinuous(path, frames: 125, packets: 250)
        #expect(try FMP4.scan(fileBytes(path)).lastSequence == 5)
        print("gst-discoverer-1.0 -v \(path):\n" + (try Players.discover(path).output))
    }

    /// A restarted encoder with other settings (B-frames, new SPS/PPS in-band): avc3 lets the
    /// decoder pick up the new parameter sets at the join.
    @Test func appendFromARestartedEncoderWithOtherSettingsDecodes() throws {
        let media = try TestMedia.load()
        #expect(H264.parameterSets(annexB: media.bframes[0].data).sps != media.sps)
        let path = try Scratch.directory("append-b") + "/append-b.mp4"
        let tracks = [media.videoTrack, media.audioTrack]
        _ = try Recorder.record(path, tracks: tracks, Part(video: media.video, audio: media.audio))
        let second = try Recorder.record(path, tracks: tracks,
                                         Part(video: media.bframes, audio: media.audio, shift: restartedClock),
                                         append: true)
        #expect(second.startOffset == 3_000_000_000)
        let decoded = try Players.gstDecode(path)
        #expect(decoded.videoFrames == 150)
        #expect(decoded.audioBuffers == 300)
        if Players.hasFFprobe {
            #expect(try Players.ffprobeFrames(path, stream: "v:0") == 150)
            #expect(try Players.ffprobePacketDTS(path, stream: "v:0") == (0..<150).map { Int64($0) * 3600 })
            try expectCleanFFmpegDecode(path)
        }
    }

    /// Where a write of the last fragment was torn. `staged…` cases are what RecordingFile
    /// can leave (its moof is typed `free` until the write is complete); `committed…` cases
    /// are a torn moof written in one go (another writer, or storage reordering writes).
    enum TornAt: String, CaseIterable, Sendable {
        case stagedInsideTheMoofHeader, stagedInsideTheMoofBody, stagedInsideTheMdat, stagedButNeverCommitted
        case committedInsideTheMoofBody, committedInsideTheMdat

        var isStaged: Bool { rawValue.hasPrefix("staged") }
    }

    /// A write torn anywhere in the last fragment: the file still plays its first two
    /// fragments, and append cuts the torn one off and continues seamlessly.
    @Test(arguments: TornAt.allCases)
    func tornLastFragmentPlaysAndAppendRepairsIt(_ tornAt: TornAt) throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("torn") + "/torn.mp4"
        let tracks = [media.videoTrack, media.audioTrack]
        _ = try Recorder.record(path, tracks: tracks, Part(video: media.video, audio: media.audio))
        var bytes = try fileBytes(path)
        let lastMoof = try #require(topLevelOffsets(bytes, FourCC.moof).last)
        let moofSize = Int(u32(bytes, lastMoof))
        if tornAt.isStaged { bytes.replaceSubrange(lastMoof + 4..<lastMoof + 8, with: Array("free".utf8)) }
        let cut = switch tornAt {
        case .stagedInsideTheMoofHeader: lastMoof + 5
        case .stagedInsideTheMoofBody, .committedInsideTheMoofBody: lastMoof + moofSize / 2
        case .stagedInsideTheMdat, .committedInsideTheMdat: (lastMoof + moofSize + bytes.count) / 2
        case .stagedButNeverCommitted: bytes.count
        }
        try Data(bytes[0..<cut]).write(to: URL(fileURLWithPath: path))

        // Plays up to the last complete fragment (2 × 25 frames, 2 × 50 packets). qtdemux also
        // plays the samples of a committed moof whose data is partly there.
        let decoded = try Players.gstDecode(path)
        if tornAt == .committedInsideTheMdat {
            #expect(decoded.videoFrames >= 50 && decoded.videoFrames < 75)
        } else {
            #expect(decoded.videoFrames == 50)
            #expect(decoded.audioBuffers == 100)
        }
        // FFmpeg cannot open a file whose last moof is cut inside its body ("error reading
        // header"): the reason RecordingFile stages fragments as `free`.
        if Players.hasFFprobe, tornAt != .committedInsideTheMoofBody {
            let frames = try Players.ffprobeFrames(path, stream: "v:0")
            #expect(tornAt.isStaged ? frames == 50 : frames >= 50)
            if tornAt.isStaged { try expectCleanFFmpegDecode(path) }
        }

        let appended = try Recorder.record(path, tracks: tracks,
                                           Part(video: media.video, audio: media.audio, shift: restartedClock),
                                           append: true)
        #expect(appended.warnings == [.truncatedTail(bytes: UInt64(cut - lastMoof))])
        #expect(appended.startOffset == 2_000_000_000)
        try expectContinuous(path, frames: 125, packets: 250)
    }

    /// Decision: a file whose moov is torn holds no media, so append starts it anew.
    @Test func aFileTornInsideTheMoovIsStartedAnew() throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("torn-moov") + "/torn-moov.mp4"
        let tracks = [media.videoTrack, media.audioTrack]
        _ = try Recorder.record(path, tracks: tracks, Part(video: media.video, audio: media.audio))
        let bytes = try fileBytes(path)
        let moov = try #require(topLevelOffsets(bytes, FourCC.moov).first)
        try Data(bytes[0..<(moov + 100)]).write(to: URL(fileURLWithPath: path))
        let appended = try Recorder.record(path, tracks: tracks, Part(video: media.video, audio: media.audio, shift: restartedClock),
                                           append: true)
        #expect(appended.warnings == [.startedNewRecording(reason: "no complete moov")])
        #expect(appended.startOffset == 0)
        try expectContinuous(path, frames: 75, packets: 150)
    }

    /// A real crash: SIGKILL a writer process mid-recording. The file plays up to its last
    /// complete fragment, and a new writer process appends to it.
    @Test func killDashNineLeavesAPlayableFileThatCanBeAppendedTo() throws {
        let media = try TestMedia.load()
        let writer = try CrashWriter.path()
        let directory = try Scratch.directory("kill")
        let path = directory + "/killed.mp4"
        let log = directory + "/writer.log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: writer)
        process.arguments = [path, media.videoDirectory, media.audioDirectory, "create", "12"]
        process.standardOutput = FileHandle(forWritingAtPath: log)
        try process.run()
        // Wait for the first fragment, then kill at a moment that varies from run to run.
        let deadline = Date().addingTimeInterval(30)
        while !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("fragment 1"), Date() < deadline {
            usleep(5000)
        }
        usleep(UInt32.random(in: 0...900_000))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL)
        let written = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
            .split(separator: "\n").filter { $0.hasPrefix("fragment ") }.count
        #expect(written >= 1 && written <= 2, "writer finished before the kill")

        let scan = try FMP4.scan(fileBytes(path))
        #expect(scan.fragmentCount >= written)
        let complete = scan.fragmentCount
        let decoded = try Players.gstDecode(path)
        #expect(decoded.videoFrames == 25 * complete)
        let discovery = try Players.discover(path)
        #expect(discovery.seconds <= Double(complete) + frame && discovery.seconds >= Double(complete - 1))

        let append = try Tools.check(writer, [path, media.videoDirectory, media.audioDirectory, "append", "0"])
        #expect(append.stdout.contains("done"))
        let frames = 25 * complete + 75
        let final = try Players.gstDecode(path)
        #expect(final.videoFrames == frames)
        #expect(final.videoTimestamps == (0..<frames).map { UInt64($0) * 40_000_000 })
        #expect(abs(try Players.discover(path).seconds - Double(frames) * frame) <= frame)
        if Players.hasFFprobe { try expectCleanFFmpegDecode(path) }
    }
}
