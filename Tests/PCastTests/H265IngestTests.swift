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
            _ = try await playlist(url) { tagLines($0, "#EXTINF").count >= 2 }
            let probe = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,width,height", "-of", "compact", url])
            #expect(probe.status == 0 && probe.output.contains("codec_name=hevc|width=1280|height=720"), "\(probe.output)")
            let decode = try runTool("ffmpeg", ["-hide_banner", "-v", "error", "-i", url, "-map", "0:v:0", "-frames:v", "25", "-f", "framecrc", "-"])
            let hlsFrames = decode.output.split(separator: "\n").filter { $0.hasPrefix("0,") }.count
            #expect(decode.status == 0 && hlsFrames == 25, "ffmpeg: \(hlsFrames) frames; \(decode.output.suffix(1_000))")

            let (reason, why) = await remote.ended()
            #expect(reason == .ended, "\(why ?? "")")
            let path = platform.configuration.recordingsDirectory + "/camera.mp4"
            #expect(await eventually(.seconds(10)) { MediaRecorder.duration(ofRecordingAt: path).map { $0 >= .seconds(9) } == true },
                    "recorded \(String(describing: MediaRecorder.duration(ofRecordingAt: path)))")
            let recorded = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,codec_tag_string,width,height", "-of", "compact", path])
            #expect(recorded.output.contains("codec_name=hevc|codec_tag_string=hvc1|width=1280|height=720"), "\(recorded.output)")
            let whole = try runTool("ffmpeg", ["-hide_banner", "-v", "error", "-i", path, "-map", "0:v:0", "-f", "framecrc", "-"])
            let recordedFrames = whole.output.split(separator: "\n").filter { $0.hasPrefix("0,") }.count
            // 12 s less the 0.5 s skipped at the start: about 287 frames.
            #expect(whole.status == 0 && recordedFrames >= 250 && !whole.output.contains("rror"), "\(recordedFrames) frames; \(whole.output.suffix(1_000))")
            _ = renderer
            await viewer.stop()
            await owner.stop()
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
