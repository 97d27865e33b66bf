// Recordings written by RecordingFile play in GStreamer (qtdemux) and FFmpeg.

import Foundation
import Testing
@testable import PCastRecording

/// Serialized: each test runs several GStreamer/FFmpeg processes and the machine is small.
@Suite(.serialized)
struct PlaybackTests {
    let frame = 0.04

    @Test func videoAndAudioRecordingPlaysInGStreamerAndFFmpeg() throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("av") + "/av.mp4"
        let recorded = try Recorder.record(path, tracks: [media.videoTrack, media.audioTrack],
                                           Part(video: media.video, audio: media.audio))
        #expect(recorded.fragments == 3)
        #expect(recorded.durationNanoseconds == 3_000_000_000)

        let discovery = try Players.discover(path)
        #expect(abs(discovery.seconds - 3.0) <= frame, "\(discovery.output)")
        #expect(discovery.width == 320 && discovery.height == 240)
        #expect(discovery.hasH264 && discovery.hasOpus)

        let decoded = try Players.gstDecode(path)
        #expect(decoded.videoFrames == 75)
        #expect(decoded.audioBuffers == 150)
        #expect(decoded.videoTimestamps == (0..<75).map { UInt64($0) * 40_000_000 })

        if Players.hasFFprobe {
            #expect(abs(try Players.ffprobeDuration(path) - 3.0) <= frame)
            #expect(try Players.ffprobeFrames(path, stream: "v:0") == 75)
            #expect(try Players.ffprobeFrames(path, stream: "a:0") == 150)
            try expectCleanFFmpegDecode(path)
        }
    }

    @Test func videoOnlyRecordingPlays() throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("video") + "/video.mp4"
        let recorded = try Recorder.record(path, tracks: [media.videoTrack], Part(video: media.video))
        #expect(recorded.fragments == 3)

        let discovery = try Players.discover(path)
        #expect(abs(discovery.seconds - 3.0) <= frame, "\(discovery.output)")
        #expect(discovery.width == 320 && discovery.height == 240)
        #expect(discovery.hasH264 && !discovery.hasOpus)
        #expect(try Players.gstDecode(path, audio: false).videoFrames == 75)
        if Players.hasFFprobe {
            #expect(try Players.ffprobeFrames(path, stream: "v:0") == 75)
            try expectCleanFFmpegDecode(path)
        }
    }

    @Test func audioOnlyRecordingPlays() throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("audio") + "/audio.mp4"
        let recorded = try Recorder.record(path, tracks: [media.audioTrack], Part(audio: media.audio))
        #expect(recorded.fragments == 3)
        #expect(recorded.durationNanoseconds == 3_000_000_000)

        let discovery = try Players.discover(path)
        #expect(abs(discovery.seconds - 3.0) <= 0.02, "\(discovery.output)")
        #expect(discovery.hasOpus && !discovery.hasH264)
        let decoded = try Players.gstDecode(path, video: false)
        #expect(decoded.audioBuffers == 150)
        if Players.hasFFprobe {
            #expect(abs(try Players.ffprobeDuration(path) - 3.0) <= 0.02)
            try expectCleanFFmpegDecode(path)
        }
    }

    /// Why RecordingFile rewrites `mehd` after every fragment: for a fragmented file qtdemux
    /// (and so gst-discoverer) takes the duration from `mehd`, not from the fragments or
    /// `mvhd`. Without it, it reports only the first fragment.
    @Test func qtdemuxTakesTheDurationFromMehd() throws {
        let media = try TestMedia.load()
        let path = try Scratch.directory("mehd") + "/mehd.mp4"
        _ = try Recorder.record(path, tracks: [media.videoTrack], Part(video: media.video))
        var bytes = try fileBytes(path)
        let scan = try FMP4.scan(bytes)
        let mehd = Int(try #require(scan.mehdDuration).offset)
        let mvhd = Int(try #require(scan.mvhdDuration).offset)
        #expect(u64(bytes, mehd) == 3000 && u64(bytes, mvhd) == 3000)

        bytes.replaceSubrange(mvhd..<mvhd + 8, with: [UInt8](repeating: 0, count: 8))
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        #expect(abs(try Players.discover(path).seconds - 3.0) <= frame)  // mvhd is not used

        bytes.replaceSubrange(mehd..<mehd + 8, with: [UInt8](repeating: 0, count: 8))
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        #expect(abs(try Players.discover(path).seconds - 1.0) <= frame)  // first fragment only
    }

    /// B-frames: composition offsets must put frames back in presentation order.
    @Test func bFrameRecordingKeepsPresentationOrder() throws {
        let media = try TestMedia.load()
        #expect(media.bframes.contains { ($0.dts ?? $0.pts) < $0.pts }, "encoder produced no reordering")
        let path = try Scratch.directory("bframes") + "/bframes.mp4"
        _ = try Recorder.record(path, tracks: [media.videoTrack, media.audioTrack],
                                Part(video: media.bframes, audio: media.audio))

        let scan = try FMP4.scan([UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
        #expect(scan.trackEnds[1] == 75 * 3600)

        let discovery = try Players.discover(path)
        #expect(abs(discovery.seconds - 3.08) <= frame, "\(discovery.output)")
        let decoded = try Players.gstDecode(path)
        #expect(decoded.videoFrames == 75)
        // Decoded output is in presentation order, one frame apart, starting after the
        // two-frame reorder delay (the origin is the first keyframe's DTS).
        #expect(decoded.videoTimestamps == (0..<75).map { UInt64($0 + 2) * 40_000_000 })
        if Players.hasFFprobe {
            #expect(try Players.ffprobeFrames(path, stream: "v:0") == 75)
            try expectCleanFFmpegDecode(path)
        }
    }
}
