import Foundation
import GStreamer
@testable import PCastMedia
import PCastRecording
import PCastTestSupport
import Testing

/// Reads a recording's boxes back: which tracks are declared and which carry samples.
private func scan(_ path: String) throws -> FMP4Scan {
    let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    return try FMP4.scan(bytes)
}

/// Decodes every declared track of `path` to fakesinks in-process; true when it reaches the end.
private func playsToTheEnd(_ path: String, audio: Bool) async throws -> Bool {
    var description = "filesrc location=\"\(path)\" ! qtdemux name=d d.video_0 ! queue ! h264parse ! avdec_h264 ! fakesink"
    if audio { description += " d.audio_0 ! queue ! opusdec ! fakesink" }
    do throws(GStreamerError) {
        try await Pipeline(description: description).runToEnd(timeout: .seconds(20))
        return true
    } catch {
        Issue.record("decoding \(path): \(error)")
        return false
    }
}

private func distance(_ a: Duration, _ b: Duration) -> Duration { a > b ? a - b : b - a }

extension Bursts {
    @Suite("Media recorder: tracks that carry media", .serialized)
    struct MediaRecorderTests {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-recorder-\(UUID().uuidString)").path

        init() throws { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }

        /// Runs H.264 (and, when `withAudio`, Opus) through appsinks into a recorder that has both attached.
        func record(_ name: String, withAudio: Bool, mode: RecordingMode = .record, seconds: Int = 3) async throws -> RecordingSummary {
            let frames = seconds * 25
            let audioSource = withAudio ? "audiotestsrc num-buffers=\(seconds * 50) samplesperbuffer=960 ! audio/x-raw,rate=48000,channels=2 ! opusenc frame-size=20"
                                        : "appsrc name=silent is-live=true format=time caps=audio/x-opus"
            let pipeline = try Pipeline(description: """
                videotestsrc num-buffers=\(frames) ! video/x-raw,width=320,height=240,framerate=25/1 ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=25 \
                ! h264parse config-interval=-1 ! video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=video sync=false \
                \(audioSource) ! appsink name=audio sync=false
                """)
            let recorder = MediaRecorder(path: directory + "/\(name).mp4", mode: mode)
            try recorder.attach(pipeline.appSink(named: "video"), kind: .video)
            try recorder.attach(pipeline.appSink(named: "audio"), kind: .audio)
            // A live branch that never delivers: PLAYING completes only when its sink gets data.
            try await pipeline.play(timeout: withAudio ? .seconds(10) : nil)
            // The silent branch never ends: wait for the video's frames instead of end of stream.
            try await Task.sleep(for: .seconds(Double(seconds) / 2 + 1))
            if !withAudio { try? pipeline.appSource(named: "silent").endOfStream() }
            try await pipeline.waitUntilEnd(timeout: .seconds(30))
            await pipeline.stop()
            return await recorder.finish()
        }

        @Test("an attached audio sink that never delivers is left out of the file, which then plays to the end")
        func silentAudioIsLeftOut() async throws {
            let summary = try await record("silent", withAudio: false)
            #expect(summary.failure == nil)
            let scanned = try scan(summary.path)
            #expect(scanned.tracks.map(\.handler) == ["vide"], "declared: \(scanned.tracks)")
            #expect(distance(summary.duration, .seconds(3)) <= .milliseconds(80), "\(summary.duration)")
            #expect(try await playsToTheEnd(summary.path, audio: false))
        }

        @Test("video and audio that both flow are both declared; an append continues after the first part")
        func bothTracksAndAppend() async throws {
            let first = try await record("both", withAudio: true)
            #expect(try scan(first.path).tracks.map(\.handler).sorted() == ["soun", "vide"])
            let second = try await record("both", withAudio: true, mode: .append, seconds: 2)
            #expect(second.startOffset == first.duration)
            #expect(distance(second.duration - first.duration, .seconds(2)) <= .milliseconds(80), "\(first.duration) + 2 s → \(second.duration)")
            #expect(try await playsToTheEnd(second.path, audio: true))
        }
    }
}
