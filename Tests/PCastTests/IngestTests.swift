import Foundation
import GStreamer
@testable import PCast
import PCastContracts
import PCastMedia
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// The clip the ingest tests pull (made by the tests: see `TestMedia`).
let clip = TestMedia.clip720pName

/// A platform whose ingest may pull from loopback (the tests' own servers).
func ingestPlatform() async throws -> LocalPlatform {
    var policy = IngestURIPolicy()
    policy.allowedHosts = ["127.0.0.1"]
    return try await LocalPlatform.start(ingestPolicy: policy)
}

/// Subscribes to `streamId` and counts decoded video frames and their size.
func watchFrames(_ platform: LocalPlatform, _ streamId: String) async throws -> (PCast, MediaStream, Renderer, Values<Dimensions>) {
    let viewer = try await client(platform)
    let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: streamId))
    let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
    #expect(await renderer.start() == .ok)
    let frames = Values<Dimensions>()
    try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
        if case .video(let frame)? = try? notification.read() { frames.append(Dimensions(width: frame.width, height: frame.height)) }
    }
    return (viewer, stream, renderer, frames)
}

extension OneAtATime {
    @Suite("Ingest of remote sources", .serialized)
    struct IngestTests {
        @Test("an mp4 served over HTTP is ingested without re-encoding; a subscriber gets 1280×720 at 25 fps; the stream ends as ended")
        func httpMP4() async throws {
            let http = try StaticHTTPServer.start(directory: (try await TestMedia.clip720p() as NSString).deletingLastPathComponent)
            defer { http.stop() }
            let platform = try await ingestPlatform()
            let owner = try await client(platform)
            let requested = ContinuousClock.now
            let remote = try await owner.publishRemote(.init(streamToken: try platform.token(.publish), streamURI: http.url(clip)))
            #expect(remote.passthrough)
            let (viewer, stream, renderer, frames) = try await watchFrames(platform, remote.streamId)
            #expect(await eventually { !frames.all.isEmpty })
            print("ingest request → first frame: \(ContinuousClock.now - requested)")
            #expect(frames.all.first == Dimensions(width: 1280, height: 720))
            #expect(await eventually { remote.progress.value?.durationMilliseconds != nil })
            let (reason, why) = await remote.ended()
            #expect(reason == .ended, "\(why ?? "")")
            #expect(await eventually { stream.endReason != nil })
            // 5.3 s at 25 fps, less the 0.5 s skipped and the subscriber's start: about 115 frames.
            let count = frames.all.count
            #expect(count >= 90 && count <= 135, "decoded \(count) frames")
            #expect(Set(frames.all) == [Dimensions(width: 1280, height: 720)])
            _ = renderer
            await viewer.stop()
            await owner.stop()
            await platform.shutdown()
        }

        @Test("a fragmented mp4 (moov without samples, then moof + mdat per second) over HTTP is ingested and ends as ended")
        func httpFragmentedMP4() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-fmp4-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
                "-hide_banner", "-loglevel", "error", "-i", try await TestMedia.clip720p(), "-c", "copy",
                "-movflags", "empty_moov+default_base_moof", "-frag_duration", "1000000", directory.appendingPathComponent("fragmented.mp4").path,
            ], environment: ProcessInfo.processInfo.environment)
            #expect(await eventually(.seconds(30)) { !ffmpeg.isRunning })
            let http = try StaticHTTPServer.start(directory: directory.path)
            defer { http.stop() }
            let platform = try await ingestPlatform()
            let owner = try await client(platform)
            let remote = try await owner.publishRemote(.init(streamToken: try platform.token(.publish), streamURI: http.url("fragmented.mp4")))
            #expect(remote.passthrough)
            let (viewer, stream, renderer, frames) = try await watchFrames(platform, remote.streamId)
            #expect(await eventually { !frames.all.isEmpty })
            #expect(frames.all.first == Dimensions(width: 1280, height: 720))
            let (reason, why) = await remote.ended()
            #expect(reason == .ended, "\(why ?? "")")
            #expect(await eventually { stream.endReason != nil })
            let count = frames.all.count
            #expect(count >= 90 && count <= 135, "decoded \(count) frames")
            _ = renderer
            await viewer.stop()
            await owner.stop()
            await platform.shutdown()
        }

        @Test("refused URIs: file:// unless enabled, metadata and private addresses, other schemes, malformed")
        func refusedURIs() async throws {
            let platform = try await LocalPlatform.start()
            let owner = try await client(platform)
            for uri in ["file:///etc/passwd", "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/x.mp4", "rtmp://192.168.1.1/live/x",
                        "http://127.0.0.1/x.mp4", "http://[::1]/x.mp4", "gopher://example.com/", "not a uri", "http:///nohost"] {
                let token = try platform.token(.publish)
                do throws(PCastError) {
                    _ = try await owner.publishRemote(.init(streamToken: token, streamURI: uri))
                    Issue.record("the platform pulled \(uri)")
                } catch {
                    #expect(error.status == .unauthorized || error.status == .badRequest, "\(uri): \(error)")
                }
            }
            #expect(owner.isOnline)
            await owner.stop()
            await platform.shutdown()
        }

        @Test("an unreachable host fails fast; a server that never answers times out; neither hangs")
        func unreachableAndSilent() async throws {
            let closed = try freeTCPPort()
            var options = IngestOptions()
            options.connectTimeout = .seconds(2)
            options.firstViewerWait = .zero
            let begun = ContinuousClock.now
            do {
                let ingest = try await IngestPublisher.start(.uri("http://127.0.0.1:\(closed)/clip.mp4"), options: options) { _ in }
                try await ingest.begin()
                let end = await ingest.ended()
                #expect(end != .endOfStream && end != .stopped, "\(end)")
            } catch {
                print("unreachable: \(error)")
            }
            #expect(ContinuousClock.now - begun < .seconds(15))
            // A listener that accepts and never sends anything.
            let silent = try SilentTCPServer()
            defer { silent.stop() }
            let start = ContinuousClock.now
            do {
                let ingest = try await IngestPublisher.start(.uri("http://127.0.0.1:\(silent.port)/clip.mp4"), options: options) { _ in }
                try await ingest.begin()
                let end = await ingest.ended()
                #expect(end == .timeout || end != .endOfStream, "\(end)")
            } catch {
                print("silent source refused at start: \(error)")
            }
            #expect(ContinuousClock.now - start < .seconds(30))
        }

        @Test("RTMP: ffmpeg pushes the clip into nginx-rtmp; the platform pulls rtmp:// and a subscriber gets frames")
        func rtmpPull() async throws {
            let nginx = try NginxRTMPServer.start()
            defer { nginx.stop() }
            let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
                "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", try await TestMedia.clip720p(), "-c", "copy", "-f", "flv", nginx.url("clip"),
            ], environment: ProcessInfo.processInfo.environment)
            defer { ffmpeg.stop() }
            let platform = try await ingestPlatform()
            let owner = try await client(platform)
            var remote: RemotePublisher?
            // nginx has the stream once ffmpeg is connected: retry the pull for a few seconds.
            for _ in 0..<20 where remote == nil {
                let token = try platform.token(.publish)
                remote = try? await owner.publishRemote(.init(streamToken: token, streamURI: nginx.url("clip")))
                if remote == nil { try await Task.sleep(for: .milliseconds(500)) }
            }
            let ingest = try #require(remote)
            let (viewer, _, renderer, frames) = try await watchFrames(platform, ingest.streamId)
            // The clip has one keyframe per loop (5.3 s): the first decodable frame may take a loop.
            #expect(await eventually(.seconds(30)) { frames.all.count >= 25 })
            #expect(frames.all.last == Dimensions(width: 1280, height: 720))
            try await ingest.stop()
            let (reason, _) = await ingest.ended()
            #expect(reason == .ended)
            _ = renderer
            await viewer.stop()
            await owner.stop()
            await platform.shutdown()
        }
    }
}

extension OneAtATime.IngestTests {
    @Test("RTSP: the platform pulls rtsp:// from GStreamer's RTSP server; H.264 passes through and a subscriber gets 1280×720 frames")
    func rtspPull() async throws {
        // A live source passed through cannot be asked for keyframes, and the clip has one per 5.3 s:
        // serve a copy with one a second (and twice as long), as a live encoder would send.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-rtsp-clip-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyed = directory.appendingPathComponent("keyed.mp4").path
        let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
            "-hide_banner", "-loglevel", "error", "-stream_loop", "1", "-i", try await TestMedia.clip720p(), "-c:v", "libx264", "-preset", "ultrafast",
            "-g", "25", "-c:a", "copy", "-t", "10", keyed,
        ], environment: ProcessInfo.processInfo.environment)
        #expect(await eventually(.seconds(60)) { !ffmpeg.isRunning })
        let rtsp = try RTSPMediaServer.start(file: keyed)
        defer { rtsp.stop() }
        let platform = try await ingestPlatform()
        let owner = try await client(platform)
        let remote = try await owner.publishRemote(.init(streamToken: try platform.token(.publish), streamURI: rtsp.url))
        #expect(remote.passthrough)
        let (viewer, _, renderer, frames) = try await watchFrames(platform, remote.streamId)
        #expect(await eventually(.seconds(20)) { frames.all.count >= 25 })
        #expect(frames.all.last == Dimensions(width: 1280, height: 720))
        try await remote.stop()
        let (reason, _) = await remote.ended()
        #expect(reason == .ended)
        _ = renderer
        await viewer.stop()
        await owner.stop()
        await platform.shutdown()
    }

    @Test("RTMP push: ffmpeg pushes into the platform's own endpoint; a subscriber gets 1280×720 frames; the stream ends with the push; forged keys are refused")
    func rtmpPush() async throws {
        let platform = try await LocalPlatform.start(rtmpPort: 0)
        let port = try #require(platform.rtmpPort)
        let ffmpegPath = try executable("ffmpeg")
        let clipPath = try await TestMedia.clip720p()
        func push(_ key: String, seconds: Int) throws -> ChildProcess {
            // Re-encoded with a keyframe a second: the clip has one keyframe per 5.3 s, and a
            // viewer who joins a passed-through live stream starts at its next keyframe.
            try ChildProcess.spawn(ffmpegPath, [
                "-hide_banner", "-loglevel", "error", "-re", "-t", String(seconds), "-i", clipPath,
                "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "25", "-c:a", "copy",
                "-f", "flv", "rtmp://127.0.0.1:\(port)/live/\(key)",
            ], environment: ProcessInfo.processInfo.environment)
        }
        // Refused keys: ffmpeg gives up quickly and nothing is published.
        let expired = try platform.token(.publish, lifetime: -60)
        let stream = try platform.token(.stream)
        let publish = try platform.token(.publish)
        for key in ["forged", expired, stream, expired + "?name=x", publish + "?type=record", publish + "?name=x&type=bogus", publish + "?name=../x&type=record"] {
            let refused = try push(key, seconds: 3)
            #expect(await eventually(.seconds(10)) { !refused.isRunning }, "ffmpeg kept pushing with key \(key.prefix(20))")
            refused.stop()
        }
        // Garbage instead of a handshake: the endpoint closes the connection and keeps serving.
        #expect(await garbageIsHungUpOn(port: port))
        let viewerToken = try platform.token(.stream, tag: .channelAlias("pushed"))
        // ffmpeg always sends the RTMP publish type `live`: the key asks for the recording.
        let ffmpeg = try push(try platform.token(.publish, applyTags: ["channelAlias:pushed"], streamName: "pushed-show") + "?name=pushed-show&type=record", seconds: 6)
        defer { ffmpeg.stop() }
        let viewer = try await client(platform)
        var subscribed: MediaStream?
        for _ in 0..<40 where subscribed == nil {
            subscribed = try? await viewer.subscribe(streamToken: viewerToken)
            if subscribed == nil { try await Task.sleep(for: .milliseconds(250)) }
        }
        let remote = try #require(subscribed, "the pushed stream never appeared")
        let renderer = remote.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        #expect(await renderer.start() == .ok)
        let frames = Values<Dimensions>()
        try renderer.setFrameReadyCallback(remote.getVideoTracks()[0]) { notification in
            if case .video(let frame)? = try? notification.read() { frames.append(Dimensions(width: frame.width, height: frame.height)) }
        }
        #expect(await eventually(.seconds(15)) { frames.all.count >= 25 })
        #expect(frames.all.last == Dimensions(width: 1280, height: 720))
        // ffmpeg finishes its 6 s and unpublishes: the stream ends as ended.
        #expect(await eventually(.seconds(20)) { remote.endReason != nil })
        if case .remote(let reason, _)? = remote.endReason { #expect(reason == .ended) } else { Issue.record("ended as \(String(describing: remote.endReason))") }
        _ = renderer
        // The push was recorded under its name: most of its 6 s (the recording starts at the first keyframe).
        let recording = try #require(try await finishedRecording(platform, "pushed-show"))
        #expect((recording["durationMilliseconds"] as? Int ?? 0) > 3000, "\(recording)")
        #expect(try await recordingsList(platform).allSatisfy { $0["name"] as? String != "x" })
        await viewer.stop()
        await platform.shutdown()
    }
}

/// Connects to 127.0.0.1:`port`, sends a version byte RTMP does not know and random bytes, and
/// reports whether the server hung up within 5 s (on a thread of its own: the reads block).
func garbageIsHungUpOn(port: Int) async -> Bool {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            guard connected else { return continuation.resume(returning: false) }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var generator = SystemRandomNumberGenerator()
            let garbage = [UInt8(0x2A)] + (0..<3000).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = garbage.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count == 0 || (count < 0 && errno == ECONNRESET) { return continuation.resume(returning: true) }
                if count < 0 { return continuation.resume(returning: false) }
            }
        }
    }
}

/// Accepts TCP connections on 127.0.0.1 and never answers (a source that gives no data).
final class SilentTCPServer: Sendable {
    let port: Int
    private let fd: Int32
    private let accepted = Mutex<[Int32]>([])

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok, listen(fd, 8) == 0 else { throw StandInFailure(description: "cannot listen") }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [weak self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                self?.accepted.withLock { $0.append(client) }
            }
        }
    }

    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        accepted.withLock { $0.forEach { close($0) } }
    }
}
