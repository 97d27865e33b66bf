import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GStreamer
@testable import PCast
@testable import PCastMedia
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// A 25 fps 640×360 test pattern with audio, keyframes every 2 s, published live with `token`.
func publishForHLS(_ pcast: PCast, token: String, tags: [String] = []) async throws -> (Publisher, UserMediaStream) {
    let media = try await UserMedia.getUserMedia(patternMediaOptions())
    let publisher = try await pcast.publish(streamToken: token, mediaStream: media, tags: tags,
                                            settings: EncodingSettings(videoBitrate: 800, keyframeInterval: 50))
    return (publisher, media)
}

/// Runs a tool to its end (at most `limit`), standard output and error into one text.
func runTool(_ name: String, _ arguments: [String], limit: Duration = .seconds(30)) throws -> (status: Int32?, output: String) {
    let log = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).log").path
    defer { try? FileManager.default.removeItem(atPath: log) }
    let child = try ChildProcess.spawn(try executable(name), arguments, environment: ProcessInfo.processInfo.environment,
                                       output: log, errorsToOutput: true)
    let status = child.wait(within: limit)
    if status == nil { child.interrupt() }
    return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
}

/// `GET` answered with status and body text.
func hlsGet(_ url: String, bearer: String? = nil, headers: [String: String] = [:]) async throws -> (status: Int, text: String, contentType: String?) {
    let (data, response) = try await httpGet(url, bearer: bearer, headers: headers)
    return (response.statusCode, String(decoding: data, as: UTF8.self), response.value(forHTTPHeaderField: "Content-Type"))
}

/// Polls the playlist until `ready` holds for it (at most `timeout`).
func playlist(_ url: String, timeout: Duration = .seconds(20), until ready: (String) -> Bool) async throws -> String {
    let deadline = ContinuousClock.now + timeout
    var last = ""
    while ContinuousClock.now < deadline {
        let reply = try await hlsGet(url)
        last = "\(reply.status): \(reply.text)"
        if reply.status == 200, ready(reply.text) { return reply.text }
        try await Task.sleep(for: .milliseconds(200))
    }
    throw TestFailure("the playlist never became ready; last answer \(last)")
}

func tagLines(_ playlist: String, _ tag: String) -> [String] {
    playlist.split(separator: "\n").map(String.init).filter { $0.hasPrefix(tag) }
}

func percentEncoded(_ token: String) -> String {
    token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? token
}

extension OneAtATime {
    @Suite("Live HLS (the streaming capability)", .serialized)
    struct HLSTests {
        @Test("a stream published with the 'streaming' capability is delivered as low-latency HLS: 2 s segments with parts of at most 0.5 s and a preload hint, the token carried into every URI; ffprobe finds H.264 640×360 and Opus, ffmpeg decodes 150 frames and GStreamer's playbin (hlsdemux2) 150 (6 s: three segments and more, followed live); once the stream ends its playlist ends with EXT-X-ENDLIST")
        func streamingPublish() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish, capabilities: ["streaming"]))
            let token = percentEncoded(try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"]))
            let url = "\(platform.httpURL)/hls/\(publisher.streamId)/index.m3u8?token=\(token)"

            let text = try await playlist(url) { tagLines($0, "#EXTINF").count >= 2 }
            #expect(text.hasPrefix("#EXTM3U\n"))
            #expect(tagLines(text, "#EXT-X-MAP") == ["#EXT-X-MAP:URI=\"init.mp4?token=\(token)\""])
            // The first segment starts where packaging did: it closes at the first keyframe after ~2 s.
            let durations = tagLines(text, "#EXTINF").compactMap { Double($0.dropFirst("#EXTINF:".count).dropLast()) }
            #expect(durations.count >= 2 && durations.allSatisfy { $0 < 2.5 } && durations.dropFirst().allSatisfy { abs($0 - 2) < 0.1 }, "\(durations)")
            let parts = tagLines(text, "#EXT-X-PART:")
            #expect(parts.count >= 5)
            #expect(parts.allSatisfy { line in
                guard let value = line.split(separator: ",").first?.split(separator: "=").last, let seconds = Double(value) else { return false }
                return seconds <= 0.5
            }, "\(parts)")
            #expect(tagLines(text, "#EXT-X-PRELOAD-HINT").count == 1)
            #expect(tagLines(text, "#EXT-X-ENDLIST").isEmpty)

            let probe = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,width,height", "-of", "compact", url])
            #expect(probe.status == 0, "\(probe.output)")
            #expect(probe.output.contains("codec_name=h264|width=640|height=360"), "\(probe.output)")
            #expect(probe.output.contains("codec_name=opus"), "\(probe.output)")

            let crc = FileManager.default.temporaryDirectory.appendingPathComponent("hls-\(UUID().uuidString).crc").path
            defer { try? FileManager.default.removeItem(atPath: crc) }
            let decode = try runTool("ffmpeg", ["-hide_banner", "-loglevel", "error", "-i", url, "-map", "0:v:0", "-frames:v", "150", "-f", "framecrc", "-y", crc])
            let frames = ((try? String(contentsOfFile: crc, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.hasPrefix("0,") }.count
            #expect(decode.status == 0 && frames == 150, "ffmpeg: \(frames) frames; \(decode.output)")

            let played = try await playbinFrames(url, count: 150)
            #expect(played.frames >= 150, "playbin: \(played.frames) frames, \(played.width)×\(played.height); \(played.error ?? "")")
            #expect(played.width == 640 && played.height == 360)

            await publisher.stop()
            await media.stop()
            let ended = try await playlist(url, timeout: .seconds(10)) { $0.hasSuffix("#EXT-X-ENDLIST\n") }
            #expect(tagLines(ended, "#EXT-X-PRELOAD-HINT").isEmpty)
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("who may play: no token 401, a forged or expired token 401, a token without 'streaming' 403, another stream's token 403; an unknown stream or file 404; _HLS_msn more than two segments ahead, or _HLS_part alone, 400; the operator's credentials open it; a Bearer token is not written into the playlist")
        func access() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish, capabilities: ["streaming"]))
            let base = "\(platform.httpURL)/hls/\(publisher.streamId)"
            let good = try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"])
            _ = try await playlist("\(base)/index.m3u8?token=\(percentEncoded(good))") { !tagLines($0, "#EXT-X-PART").isEmpty }

            #expect(try await hlsGet("\(base)/index.m3u8").status == 401)
            var forged = Array(good)
            forged[forged.count / 2] = forged[forged.count / 2] == "A" ? "B" : "A"
            #expect(try await hlsGet("\(base)/index.m3u8", bearer: String(forged)).status == 401)
            let expired = try platform.token(.stream, lifetime: -10, originStreamId: publisher.streamId, capabilities: ["streaming"])
            #expect(try await hlsGet("\(base)/index.m3u8", bearer: expired).status == 401)
            let plain = try platform.token(.stream, originStreamId: publisher.streamId)
            #expect(try await hlsGet("\(base)/index.m3u8", bearer: plain).status == 403)
            let other = try platform.token(.stream, originStreamId: "stream-other", capabilities: ["streaming"])
            #expect(try await hlsGet("\(base)/index.m3u8", bearer: other).status == 403)
            let publish = try platform.token(.publish, capabilities: ["streaming"])
            #expect(try await hlsGet("\(base)/index.m3u8", bearer: publish).status == 401, "a publish token does not play")

            let anyStream = try platform.token(.stream, capabilities: ["streaming"])
            #expect(try await hlsGet("\(platform.httpURL)/hls/stream-none/index.m3u8", bearer: anyStream).status == 404)
            for file in ["seg999.m4s", "part999.0.m4s", "index.txt", "..%2Fsecret", "seg1.mp4"] {
                #expect(try await hlsGet("\(base)/\(file)", bearer: good).status == 404, "\(file)")
            }
            #expect(try await hlsGet("\(base)/index.m3u8?_HLS_msn=999", bearer: good).status == 400)
            #expect(try await hlsGet("\(base)/index.m3u8?_HLS_part=1", bearer: good).status == 400)
            #expect(try await hlsGet("\(base)/index.m3u8?_HLS_msn=-1", bearer: good).status == 400)

            let basic = Data("\(platform.configuration.applicationId):\(platform.configuration.secret)".utf8).base64EncodedString()
            let operatorReply = try await hlsGet("\(base)/index.m3u8", headers: ["Authorization": "Basic \(basic)"])
            #expect(operatorReply.status == 200 && operatorReply.contentType == "application/vnd.apple.mpegurl")
            let bearerReply = try await hlsGet("\(base)/index.m3u8", bearer: good)
            #expect(bearerReply.status == 200 && !bearerReply.text.contains("token="), "\(bearerReply.text)")
            await publisher.stop()
            await media.stop()
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("blocking reload: _HLS_msn/_HLS_part for the next part is held until it is cut (under a part target, 0.5 s, and not at once) and the answer lists it; a request for the hinted part is held until it is there")
        func blockingReload() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish, capabilities: ["streaming"]))
            let base = "\(platform.httpURL)/hls/\(publisher.streamId)"
            let token = try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"])
            let first = try await playlist("\(base)/index.m3u8?token=\(percentEncoded(token))") { !tagLines($0, "#EXT-X-PRELOAD-HINT").isEmpty }
            // The hint names the next part: partM.P.m4s.
            let hint = try #require(tagLines(first, "#EXT-X-PRELOAD-HINT").first)
            let name = try #require(hint.split(separator: "\"").dropFirst().first.map { String($0.split(separator: "?")[0]) })
            let fields = name.dropFirst(4).dropLast(4).split(separator: ".")
            let (sequence, part) = (try #require(Int(fields[0])), try #require(Int(fields[1])))

            let asked = ContinuousClock.now
            let reloaded = try await hlsGet("\(base)/index.m3u8?_HLS_msn=\(sequence)&_HLS_part=\(part)", bearer: token)
            let waited = ContinuousClock.now - asked
            #expect(reloaded.status == 200)
            #expect(reloaded.text.contains("URI=\"\(name)\""), "the reload lists \(name):\n\(reloaded.text)")
            #expect(waited < .milliseconds(1500), "held \(waited)")

            // The next hint: requested before it exists, answered once cut.
            let nextHint = try #require(tagLines(reloaded.text, "#EXT-X-PRELOAD-HINT").first)
            let nextName = try #require(nextHint.split(separator: "\"").dropFirst().first.map(String.init))
            let partAsked = ContinuousClock.now
            let (data, response) = try await httpGet("\(base)/\(nextName)", bearer: token)
            let partWaited = ContinuousClock.now - partAsked
            #expect(response.statusCode == 200 && data.count > 100, "\(nextName): \(response.statusCode)")
            #expect(response.value(forHTTPHeaderField: "Content-Type") == "video/iso.segment")
            #expect(partWaited > .milliseconds(20) && partWaited < .milliseconds(1500), "the hinted part was held \(partWaited)")
            print("blocking reload held \(waited); hinted part held \(partWaited)")
            await publisher.stop()
            await media.stop()
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("an SDK viewer whose stream token has 'streaming' (not 'real-time') plays the stream as HLS, following its parts with blocking reloads (the default) or as segments (hlsdemux2): subscribe answers with the HLS source, the renderer's frame-ready hook gets 150 frames (6 s) of 640×360, streamingSourceMapping sends the playlist and its parts through the operator's CDN (an nginx reverse proxy); the stream ends as the remote's `ended` once the publisher stops",
              arguments: [StreamingPlayback.lowLatency, .segments])
        func sdkViewerThroughMapping(_ playback: StreamingPlayback) async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish))
            let cdn = try ReverseProxyHTTPServer.start(upstream: platform.httpURL)
            defer { cdn.stop() }
            var options = PCastOptions(uri: platform.signalingURL)
            options.streamingSourceMapping = StreamingSourceMapping(patternToReplace: #"^http://127\.0\.0\.1:[0-9]+/hls"#, replacement: cdn.base + "/hls")
            options.streamingPlayback = playback
            let viewer = PCast(options)
            try await viewer.start(authToken: try platform.token(.auth))
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"]))
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            _ = await renderer.start()
            let frames = Atomic<Int>(0), width = Atomic<Int>(0)
            try renderer.setFrameReadyCallback(try #require(stream.getVideoTracks().first)) { notification in
                guard case .video(let frame)? = try? notification.read() else { return }
                frames.add(1, ordering: .relaxed)
                width.store(frame.width, ordering: .relaxed)
            }
            // Six seconds of frames: the player follows the live playlist past its first segments.
            #expect(await eventually(.seconds(25)) { frames.load(ordering: .relaxed) >= 150 }, "\(frames.load(ordering: .relaxed)) frames")
            #expect(width.load(ordering: .relaxed) == 640)
            let requests = cdn.requests
            #expect(requests.contains { $0.hasPrefix("200 /cdn/hls/\(publisher.streamId)/index.m3u8?token=") }, "\(requests)")
            #expect(requests.contains { $0.hasPrefix("200 /cdn/hls/\(publisher.streamId)/") && $0.contains(".m4s?token=") }, "\(requests)")
            // Following parts: blocking reloads, each next part asked for through the CDN.
            #expect(requests.contains { $0.contains("index.m3u8?") && $0.contains("_HLS_msn=") } == (playback == .lowLatency), "\(requests)")
            #expect(stream.endReason == nil)

            await publisher.stop()
            await media.stop()
            #expect(await eventually(.seconds(20)) { stream.endReason != nil })
            #expect(stream.endReason == .remote(.ended, "the stream's HLS playlist ended"), "\(String(describing: stream.endReason))")
            await renderer.stop()
            await viewer.stop()
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("a 'streaming' token cannot record (invalidRequest: the recorder needs the real-time stream); an invalid streamingSourceMapping pattern fails the subscribe with invalidRequest and plays nothing; a mapping to a CDN that is not there fails the subscribe (media) or ends the stream as failed within 20 s, no hang")
        func streamingRefusals() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish))
            let token = try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"])
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("hls-\(UUID().uuidString).mp4").path
            do throws(PCastError) {
                _ = try await pcast.record(streamToken: token, to: path)
                Issue.record("a streaming token recorded")
            } catch {
                #expect(error.code == .invalidRequest && error.detail.contains("HLS"), "\(error)")
            }
            #expect(!FileManager.default.fileExists(atPath: path))
            var options = PCastOptions(uri: platform.signalingURL)
            options.streamingSourceMapping = StreamingSourceMapping(patternToReplace: "(unclosed", replacement: "x")
            let viewer = PCast(options)
            try await viewer.start(authToken: try platform.token(.auth))
            do throws(PCastError) {
                _ = try await viewer.subscribe(streamToken: token)
                Issue.record("the subscribe succeeded with an invalid mapping")
            } catch {
                #expect(error.code == .invalidRequest && error.detail.contains("streamingSourceMapping"), "\(error)")
            }
            await viewer.stop()

            let closedPort = try freeTCPPort()   // nothing listens there
            var unreachable = PCastOptions(uri: platform.signalingURL)
            unreachable.streamingSourceMapping = StreamingSourceMapping(patternToReplace: #"^http://127\.0\.0\.1:[0-9]+"#, replacement: "http://127.0.0.1:\(closedPort)")
            let stranded = PCast(unreachable)
            try await stranded.start(authToken: try platform.token(.auth))
            let asked = ContinuousClock.now
            do throws(PCastError) {
                let stream = try await stranded.subscribe(streamToken: token)
                #expect(await eventually(.seconds(20)) { stream.endReason != nil })
                guard case .failed? = stream.endReason else {
                    Issue.record("the stream did not fail: \(String(describing: stream.endReason))")
                    return
                }
            } catch {
                #expect(error.code == .media, "\(error)")
            }
            #expect(ContinuousClock.now - asked < .seconds(25))
            await stranded.stop()
            await publisher.stop()
            await media.stop()
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("a channel's stream published without 'streaming' is packaged when a player with a 'streaming' token for the channel asks for /hls/<alias>/index.m3u8")
        func channelOnRequest() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish), tags: ["channelAlias:news"])
            let token = try platform.token(.stream, tag: .channelAlias("news"), capabilities: ["streaming"])
            let url = "\(platform.httpURL)/hls/news/index.m3u8?token=\(percentEncoded(token))"
            let text = try await playlist(url) { !tagLines($0, "#EXTINF").isEmpty }
            #expect(tagLines(text, "#EXT-X-PART:").first?.contains("INDEPENDENT=YES") == true, "the first part starts at a keyframe:\n\(text)")
            let probe = try runTool("ffprobe", ["-v", "error", "-show_entries", "stream=codec_name", "-of", "compact", url])
            #expect(probe.output.contains("codec_name=h264"), "\(probe.output)")
            let other = try platform.token(.stream, tag: .channelAlias("sports"), capabilities: ["streaming"])
            #expect(try await hlsGet("\(platform.httpURL)/hls/news/index.m3u8", bearer: other).status == 403)
            await publisher.stop()
            await media.stop()
            await pcast.stop()
            await platform.shutdown()
        }
    }
}

/// Plays `url` with GStreamer's playbin until `count` video frames are decoded (at most 30 s).
func playbinFrames(_ url: String, count: Int) async throws -> (frames: Int, width: Int, height: Int, error: String?) {
    // playbin takes its sinks in only as it prerolls: the appsink is found once it plays (it
    // drops rather than queue what comes before its callback is set).
    let pipeline = try Pipeline(description: "playbin uri=\"\(url)\" video-sink=\"appsink name=hlsvideo sync=false max-buffers=1 drop=true\" audio-sink=\"fakesink sync=false\"")
    let frames = Atomic<Int>(0)
    let size = Mutex<(Int, Int)>((0, 0))
    var failure: String?
    do throws(GStreamerError) {
        try await pipeline.play(timeout: .seconds(20))
        try pipeline.appSink(named: "hlsvideo").onSample { sample in
            frames.add(1, ordering: .relaxed)
            if let info = sample.videoInfo { size.withLock { $0 = (info.width, info.height) } }
        }
    } catch {
        failure = "\(error)"
    }
    let deadline = ContinuousClock.now + .seconds(30)
    while failure == nil, frames.load(ordering: .relaxed) < count, ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(50))
    }
    await pipeline.stop()
    let (width, height) = size.withLock { $0 }
    return (frames.load(ordering: .relaxed), width, height, failure)
}

struct StreamingSourceMappingTests {
    @Test("the playlist URL: http for ws and https for wss, the signaling node's host and port, the platform's path, the token percent-encoded in the query")
    func streamingURL() throws {
        let token = "DIGEST:ab+c/d=="
        #expect(try PCast.streamingURL(signaling: "ws://10.0.0.5:8080/ws", playlistPath: "/hls/s-1/index.m3u8", streamToken: token)
                == "http://10.0.0.5:8080/hls/s-1/index.m3u8?token=DIGEST%3Aab%2Bc%2Fd%3D%3D")
        #expect(try PCast.streamingURL(signaling: "wss://live.example.com/ws", playlistPath: "/hls/s-1/index.m3u8", streamToken: "t")
                == "https://live.example.com/hls/s-1/index.m3u8?token=t")
        #expect(throws: PCastError.self) { try PCast.streamingURL(signaling: "not a uri", playlistPath: "/hls/x/index.m3u8", streamToken: "t") }
    }

    @Test("the seed's mapping: the first match of the pattern is replaced, $1 names a group, a URL it does not match is left alone, an invalid pattern is invalidRequest")
    func mapping() throws {
        let url = "https://phenixrts.com/video/hls/s-1/index.m3u8?token=t"
        let seed = StreamingSourceMapping(patternToReplace: #"https:\/\/phenixrts\.com\/video"#, replacement: "https://myown.cdn.com")
        #expect(try seed.apply(to: url) == "https://myown.cdn.com/hls/s-1/index.m3u8?token=t")
        let grouped = StreamingSourceMapping(patternToReplace: #"^https://([a-z]+)\.com/video"#, replacement: "https://cdn.example.net/$1")
        #expect(try grouped.apply(to: url) == "https://cdn.example.net/phenixrts/hls/s-1/index.m3u8?token=t")
        #expect(try seed.apply(to: "http://127.0.0.1:8080/hls/s/index.m3u8") == "http://127.0.0.1:8080/hls/s/index.m3u8")
        do throws(PCastError) {
            _ = try StreamingSourceMapping(patternToReplace: "[", replacement: "x").apply(to: url)
            Issue.record("an invalid pattern was applied")
        } catch {
            #expect(error.code == .invalidRequest)
        }
    }
}
