import Foundation
import GStreamer
@testable import PCast
@testable import PCastMedia
import PCastNode
import PCastTestSupport
import Testing

/// An H.265 clip as cameras and live encoders make it, by ffmpeg's libx265: `seconds` of 1280×720
/// at 25 fps, a keyframe a second (CRA pictures after the first IDR, the parameter sets only in the
/// file's `hvcC`), no B-frames, `hvc1` in mp4 with AAC. In a directory of its own (remove it when
/// done). (B-frames are not carried in order yet: RTP gives no decode times, and the recorder
/// takes presentation times for them.)
func makeH265Clip(seconds: Int) async throws -> (path: String, directory: URL) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-h265-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let path = directory.appendingPathComponent("camera.mp4").path
    let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
        "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25", "-f", "lavfi", "-i", "sine=frequency=440",
        "-t", String(seconds), "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "keyint=25:bframes=0:log-level=error", "-tag:v", "hvc1",
        "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", path,
    ], environment: ProcessInfo.processInfo.environment)
    #expect(await eventually(.seconds(120)) { !ffmpeg.isRunning })
    let probe = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,codec_tag_string", "-of", "compact", path])
    guard probe.output.contains("codec_name=hevc|codec_tag_string=hvc1") else {
        throw StandInFailure(description: "ffmpeg made no H.265 clip (libx265): \(probe.output)")
    }
    return (path, directory)
}

/// The live LL-HLS at `url` (a playlist with two segments) is hevc `width`×`height` to ffprobe, and
/// ffmpeg decodes 25 frames of it.
func expectHEVCPlaylist(_ url: String, width: Int, height: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    _ = try await playlist(url) { tagLines($0, "#EXTINF").count >= 2 }
    let probe = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,width,height", "-of", "compact", url])
    #expect(probe.status == 0 && probe.output.contains("codec_name=hevc|width=\(width)|height=\(height)"), "\(probe.output)",
            sourceLocation: sourceLocation)
    let decode = try runTool("ffmpeg", ["-hide_banner", "-v", "error", "-i", url, "-map", "0:v:0", "-frames:v", "25", "-f", "framecrc", "-"])
    let frames = decode.output.split(separator: "\n").filter { $0.hasPrefix("0,") }.count
    #expect(decode.status == 0 && frames == 25, "ffmpeg: \(frames) frames; \(decode.output.suffix(1_000))", sourceLocation: sourceLocation)
}

/// The platform's recording at `path` grows to 9 s or more, is `hvc1` `width`×`height`, and ffmpeg
/// decodes at least `frames` frames of it without an error.
func expectHEVCRecording(_ path: String, width: Int, height: Int, frames minimum: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    #expect(await eventually(.seconds(10)) { MediaRecorder.duration(ofRecordingAt: path).map { $0 >= .seconds(9) } == true },
            "recorded \(String(describing: MediaRecorder.duration(ofRecordingAt: path)))", sourceLocation: sourceLocation)
    let recorded = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,codec_tag_string,width,height", "-of", "compact", path])
    #expect(recorded.output.contains("codec_name=hevc|codec_tag_string=hvc1|width=\(width)|height=\(height)"), "\(recorded.output)",
            sourceLocation: sourceLocation)
    let whole = try runTool("ffmpeg", ["-hide_banner", "-v", "error", "-i", path, "-map", "0:v:0", "-f", "framecrc", "-"])
    let frames = whole.output.split(separator: "\n").filter { $0.hasPrefix("0,") }.count
    #expect(whole.status == 0 && frames >= minimum && !whole.output.contains("rror"), "\(frames) frames; \(whole.output.suffix(1_000))",
            sourceLocation: sourceLocation)
}

extension OneAtATime {
    /// Issue 43, item 5: H.265 from cameras and encoders, passed through.
    @Suite("H.265 ingest: passed through to SDK viewers, recordings and LL-HLS; refused to a browser offer without it", .serialized)
    struct H265IngestTests {
        @Test("an H.265 mp4 (hvc1, ffmpeg's libx265, CRA keyframes) over HTTP is ingested without re-encoding and recorded by the platform: an SDK viewer decodes 1280×720 with avdec_h265; a WHEP offer without H.265 is refused 422 naming H.265 and the HLS address; the stream's LL-HLS is hevc 1280×720 to ffprobe and ffmpeg decodes 25 frames from the live playlist; the platform's recording is hvc1 1280×720 that ffmpeg decodes whole without an error")
        func httpMP4() async throws {
            let clip = try await makeH265Clip(seconds: 12)
            defer { try? FileManager.default.removeItem(at: clip.directory) }
            let http = try StaticHTTPServer.start(directory: clip.directory.path)
            defer { http.stop() }
            let platform = try await ingestPlatform()
            let owner = try await client(platform)
            let remote = try await owner.publishRemote(.init(streamToken: try platform.token(.publish, capabilities: ["streaming"], streamName: "camera"),
                                                             streamURI: http.url("camera.mp4"), publishType: .record, streamName: "camera"))
            #expect(remote.passthrough)
            let (viewer, stream, renderer, frames) = try await watchFrames(platform, remote.streamId)
            let decoders = stream.engine.pipeline.elements.map(\.factoryName)
            #expect(decoders.contains("avdec_h265") && !decoders.contains("avdec_h264"), "\(decoders)")
            #expect(await eventually(.seconds(20)) { frames.all.count >= 25 }, "decoded \(frames.all.count) frames")
            #expect(Set(frames.all) == [Dimensions(width: 1280, height: 720)], "\(Set(frames.all))")

            // A browser that offers no H.265 is told why and where to watch instead.
            let refused = try curlRequest("POST", platform.httpURL + "/whep/\(remote.streamId)",
                                          token: try platform.token(.stream, originStreamId: remote.streamId), body: browserOffer(direction: "recvonly"))
            #expect(refused.status == 422 && refused.contentType.hasPrefix("application/problem+json"), "\(refused.status) \(refused.body)")
            let detail = (try JSONSerialization.jsonObject(with: Data(refused.body.utf8)) as? [String: Any])?["detail"] as? String ?? ""
            #expect(detail.contains("H.265") && detail.contains("/hls/\(remote.streamId)/index.m3u8"), "\(refused.body)")

            let token = percentEncoded(try platform.token(.stream, originStreamId: remote.streamId, capabilities: ["streaming"]))
            let url = "\(platform.httpURL)/hls/\(remote.streamId)/index.m3u8?token=\(token)"
            try await expectHEVCPlaylist(url, width: 1280, height: 720)

            let (reason, why) = await remote.ended()
            #expect(reason == .ended, "\(why ?? "")")
            // 12 s less the 0.5 s skipped at the start: about 287 frames.
            try await expectHEVCRecording(platform.configuration.recordingsDirectory + "/camera.mp4", width: 1280, height: 720, frames: 250)
            _ = renderer
            await viewer.stop()
            await owner.stop()
            await platform.shutdown()
        }

        @Test("an H.265 RTMP push in enhanced RTMP ('hvc1', FFmpeg 8's flv muxer in PyAV, libx265, AAC) into the platform's endpoint is passed through: an SDK viewer decodes 640×360 with avdec_h265; the stream's LL-HLS is hevc 640×360 to ffprobe and ffmpeg decodes 25 frames from it; the push is recorded as hvc1 640×360 that ffmpeg decodes whole; an AV1 push is refused with a reason naming AV1 and publishes nothing")
        func rtmpEnhancedPush() async throws {
            let platform = try await LocalPlatform.start(rtmpPort: 0)
            let port = try #require(platform.rtmpPort)
            let logs = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-rtmp-push-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: logs, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: logs) }
            func push(_ key: String, seconds: Int, encoder: String, log: String) throws -> ChildProcess {
                try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/env"), [
                    "python3", repositoryRoot.appendingPathComponent("scripts/peers/rtmp-push.py").path,
                    "rtmp://127.0.0.1:\(port)/live/\(key)", String(seconds), encoder,
                ], environment: ProcessInfo.processInfo.environment, output: logs.appendingPathComponent(log).path, errorsToOutput: true)
            }
            func log(_ name: String) -> String { (try? String(contentsOf: logs.appendingPathComponent(name), encoding: .utf8)) ?? "" }

            // AV1 over enhanced RTMP: named in the refusal, nothing published.
            let av1 = try push(try platform.token(.publish, applyTags: ["channelAlias:av1-push"]), seconds: 5, encoder: "libsvtav1", log: "av1.log")
            defer { av1.stop() }
            #expect(await eventually(.seconds(20)) { !av1.isRunning }, "the AV1 push was not refused")
            #expect(log("av1.log").contains("RTMP video in AV1 is not carried"), "\(log("av1.log").suffix(1_500))")
            let nobody = try await client(platform)
            let refused: MediaStream? = try? await nobody.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias("av1-push")))
            #expect(refused == nil, "a stream was published from the refused push")
            await nobody.stop()

            let name = "h265-push"
            let pusher = try push(try platform.token(.publish, applyTags: ["channelAlias:h265-push"], streamName: name) + "?name=\(name)&type=record",
                                  seconds: 12, encoder: "libx265", log: "h265.log")
            defer { pusher.stop() }
            let viewer = try await client(platform)
            var subscribed: MediaStream?
            for _ in 0..<60 where subscribed == nil {
                subscribed = try? await viewer.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias("h265-push")))
                if subscribed == nil { try await Task.sleep(for: .milliseconds(250)) }
            }
            let stream = try #require(subscribed, "the pushed stream never appeared; the pusher: \(log("h265.log").suffix(1_500))")
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            #expect(await renderer.start() == .ok)
            let frames = Values<Dimensions>()
            try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
                if case .video(let frame)? = try? notification.read() { frames.append(Dimensions(width: frame.width, height: frame.height)) }
            }
            let decoders = stream.engine.pipeline.elements.map(\.factoryName)
            #expect(decoders.contains("avdec_h265") && !decoders.contains("avdec_h264"), "\(decoders)")
            #expect(await eventually(.seconds(20)) { frames.all.count >= 25 }, "decoded \(frames.all.count) frames")
            #expect(Set(frames.all) == [Dimensions(width: 640, height: 360)], "\(Set(frames.all))")

            let token = percentEncoded(try platform.token(.stream, tag: .channelAlias("h265-push"), capabilities: ["streaming"]))
            let url = "\(platform.httpURL)/hls/h265-push/index.m3u8?token=\(token)"
            try await expectHEVCPlaylist(url, width: 640, height: 360)

            // The pusher sends its 12 s and unpublishes: the stream ends, its recording is whole.
            #expect(await eventually(.seconds(40)) { !pusher.isRunning }, "the pusher did not finish")
            #expect(log("h265.log").contains("sent 360 frames"), "\(log("h265.log").suffix(1_500))")
            #expect(await eventually(.seconds(20)) { stream.endReason != nil })
            // 12 s from the first keyframe the recorder saw: about 330 frames or more.
            try await expectHEVCRecording(platform.configuration.recordingsDirectory + "/\(name).mp4", width: 640, height: 360, frames: 270)
            _ = renderer
            await viewer.stop()
            await platform.shutdown()
        }

        @Test("an H.265 camera over RTSP (GStreamer's RTSP server, rtph265pay) is ingested without re-encoding and an SDK viewer decodes its 1280×720 frames with avdec_h265; asked for at most 15 fps, the same camera is decoded and re-encoded to H.264 that the viewer decodes with avdec_h264")
        func rtspCamera() async throws {
            let clip = try await makeH265Clip(seconds: 10)
            defer { try? FileManager.default.removeItem(at: clip.directory) }
            let rtsp = try RTSPMediaServer.start(file: clip.path, h265: true)
            defer { rtsp.stop() }
            let platform = try await ingestPlatform()
            let owner = try await client(platform)
            for maximumFrameRate in [nil, 15.0] {
                let remote = try await owner.publishRemote(.init(streamToken: try platform.token(.publish), streamURI: rtsp.url,
                                                                 maximumFrameRate: maximumFrameRate))
                #expect(remote.passthrough == (maximumFrameRate == nil))
                let (viewer, stream, renderer, frames) = try await watchFrames(platform, remote.streamId)
                let decoders = stream.engine.pipeline.elements.map(\.factoryName)
                let expected = maximumFrameRate == nil ? "avdec_h265" : "avdec_h264"
                #expect(decoders.contains(expected), "\(expected) not among \(decoders)")
                #expect(await eventually(.seconds(20)) { frames.all.count >= 25 }, "decoded \(frames.all.count) frames")
                #expect(frames.all.last == Dimensions(width: 1280, height: 720))
                try await remote.stop()
                let (reason, _) = await remote.ended()
                #expect(reason == .ended)
                _ = renderer
                await viewer.stop()
            }
            await owner.stop()
            await platform.shutdown()
        }
    }
}
