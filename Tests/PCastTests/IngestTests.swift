import Foundation
import GStreamer
@testable import PCast
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

let sharedMedia = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../shared/media").standardized.path
let clip = "bigbuckbunny-720p.mp4"

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

@Suite("Ingest of remote sources", .serialized)
struct IngestTests {
    @Test("an mp4 served over HTTP is ingested without re-encoding; a subscriber gets 1280×720 at 25 fps; the stream ends as ended")
    func httpMP4() async throws {
        let http = try StaticHTTPServer.start(directory: sharedMedia)
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
            "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", "\(sharedMedia)/\(clip)", "-c", "copy", "-f", "flv", nginx.url("clip"),
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
