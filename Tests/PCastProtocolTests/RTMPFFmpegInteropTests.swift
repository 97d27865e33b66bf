import Foundation
@testable import PCastProtocol
import PCastTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Real ffmpeg pushes into a loopback TCP listener whose one connection is driven by
// RTMPServerSession; the FLV we write is checked with GStreamer. Blocking work (accept/recv,
// waiting for child processes) runs on dedicated threads, never on Swift's cooperative pool.


/// What one served connection produced.
struct RTMPServeResult: Sendable {
    var flv: [UInt8] = []
    var publishRequest: String?
    var publishType: RTMPPublishType?
    var app: String?
    var metadata: AMF0Object?
    var ended: RTMPEndReason?
    var refused: RTMPRefusal?
    var sessionError: RTMPError?
    var failure: String?
    var statistics = RTMPServerSession.Statistics()
    var audioTimestamps: [UInt32] = []
    var videoTimestamps: [UInt32] = []
    var closedByUs = false
}

/// A listener on 127.0.0.1 (ephemeral port) that serves exactly one RTMP connection.
final class LoopbackRTMPServer: Sendable {
    let port: Int
    private let listener: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok, listen(fd, 4) == 0 else {
            close(fd)
            throw TestFailure("cannot listen on 127.0.0.1")
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(listener) }

    /// Accepts one connection and drives it with a session until the peer closes, we close, or
    /// `timeout` passes. `decide` answers publish requests (true: accept).
    func serveOne(timeout: TimeInterval, decide: @escaping @Sendable (String) -> Bool) async -> RTMPServeResult {
        let listener = self.listener
        return await withCheckedContinuation { continuation in
            let thread = Thread {
                continuation.resume(returning: Self.serve(listener: listener, timeout: timeout, decide: decide))
            }
            thread.start()
        }
    }

    private static func serve(listener: Int32, timeout: TimeInterval, decide: (String) -> Bool) -> RTMPServeResult {
        var result = RTMPServeResult()
        let deadline = Date().addingTimeInterval(timeout)
        var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, Int32(timeout * 1000)) == 1 else {
            result.failure = "no connection within \(timeout) s"
            return result
        }
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else {
            result.failure = "accept() failed"
            return result
        }
        defer { close(fd) }
        var tv = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))

        var session = RTMPServerSession()
        var writer = FLVWriter(hasAudio: true, hasVideo: true)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)

        func write(_ bytes: [UInt8]) -> Bool {
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return false }
                offset += n
            }
            return true
        }

        // Returns false when the connection should be closed.
        func perform(_ actions: [RTMPServerSession.Action]) -> Bool {
            var keepOpen = true
            for action in actions {
                switch action {
                case .send(let bytes):
                    if !write(bytes) { keepOpen = false }
                case .connected(let info):
                    result.app = info.app
                case .publishRequested(_, let key, let type):
                    result.publishRequest = key
                    result.publishType = type
                    do {
                        let answer = decide(key) ? try session.accept() : try session.reject("Invalid stream key.")
                        if !perform(answer) { keepOpen = false }
                    } catch {
                        result.failure = "accept/reject failed: \(error)"
                        keepOpen = false
                    }
                case .refused(let refusal):
                    result.refused = refusal
                case .metadata(let object, _):
                    result.metadata = object
                    result.flv += (try? writer.write(action)) ?? []
                case .audio(let t, _):
                    result.audioTimestamps.append(t)
                    result.flv += (try? writer.write(action)) ?? []
                case .video(let t, _):
                    result.videoTimestamps.append(t)
                    result.flv += (try? writer.write(action)) ?? []
                case .ended(let reason):
                    if result.ended == nil { result.ended = reason }
                case .close:
                    result.closedByUs = true
                    keepOpen = false
                }
            }
            return keepOpen
        }

        while Date() < deadline {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { continue }
            if n <= 0 {
                _ = perform(session.connectionClosed())
                break
            }
            do {
                if !perform(try session.receive(buffer[0..<n])) { break }
            } catch {
                result.sessionError = error
                break
            }
        }
        if Date() >= deadline { result.failure = "connection still open after \(timeout) s" }
        result.statistics = session.statistics
        return result
    }
}

struct ChildResult: Sendable {
    var status: Int32
    var output: String
    var elapsed: TimeInterval
    var timedOut: Bool
}

/// Runs a program to completion (killed after `timeout`) with stdout+stderr captured in a file.
/// The wait happens on a dedicated thread so the cooperative pool is never blocked.
func runChild(_ path: String, _ arguments: [String], timeout: TimeInterval) async throws -> ChildResult {
    let outputURL = FileManager.default.temporaryDirectory.appendingPathComponent("rtmp-child-\(UUID().uuidString).log")
    guard FileManager.default.createFile(atPath: outputURL.path, contents: nil) else {
        throw TestFailure("cannot create \(outputURL.path)")
    }
    let handle = try FileHandle(forWritingTo: outputURL)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardOutput = handle
    process.standardError = handle
    process.standardInput = FileHandle.nullDevice
    let start = Date()
    try process.run()
    let box = ProcessBox(process)
    let (status, timedOut) = await withCheckedContinuation { (continuation: CheckedContinuation<(Int32, Bool), Never>) in
        let thread = Thread {
            var timedOut = false
            while box.process.isRunning {
                if Date().timeIntervalSince(start) > timeout, !timedOut {
                    timedOut = true
                    box.process.terminate()
                }
                usleep(10_000)
            }
            box.process.waitUntilExit()
            continuation.resume(returning: (box.process.terminationStatus, timedOut))
        }
        thread.start()
    }
    try? handle.close()
    let output = (try? String(contentsOf: outputURL, encoding: .utf8)) ?? ""
    try? FileManager.default.removeItem(at: outputURL)
    return ChildResult(status: status, output: output, elapsed: Date().timeIntervalSince(start), timedOut: timedOut)
}

/// `Process` is not Sendable; the waiting thread is its only user once started.
private final class ProcessBox: @unchecked Sendable {
    let process: Process
    init(_ process: Process) { self.process = process }
}

/// ffmpeg's arguments to push the tests' 720p clip (see `TestMedia`).
private func ffmpegPush(port: Int, key: String, seconds: Int, app: String = "live") async throws -> [String] {
    ["-hide_banner", "-loglevel", "error", "-re", "-t", "\(seconds)", "-i", try await TestMedia.clip720p(), "-c", "copy", "-f", "flv",
     "rtmp://127.0.0.1:\(port)/\(app)/\(key)"]
}

@Suite("RTMP interop with ffmpeg", .serialized)
struct RTMPFFmpegInteropTests {
    static let available = FileManager.default.isExecutableFile(atPath: "/usr/bin/ffmpeg")

    @Test("ffmpeg publishes; the FLV we write demuxes and decodes as H.264 1280x720 + AAC")
    func publishAndDecode() async throws {
        try #require(Self.available, "needs /usr/bin/ffmpeg")
        let server = try LoopbackRTMPServer()
        let key = "tok_" + String(repeating: "A1b2", count: 100) + "?sig=xyz"
        async let served = server.serveOne(timeout: 15) { $0 == key }
        let ffmpeg = try await runChild("/usr/bin/ffmpeg", try await ffmpegPush(port: server.port, key: key, seconds: 3), timeout: 15)
        let result = await served

        #expect(ffmpeg.status == 0, "ffmpeg failed: \(ffmpeg.output)")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.sessionError == nil, "session error: \(String(describing: result.sessionError))")
        #expect(result.app == "live")
        #expect(result.publishRequest == key)
        #expect(result.publishType == .live)
        #expect(result.ended == .unpublished || result.ended == .streamDeleted || result.ended == .connectionClosed)
        #expect(result.metadata?["width"]?.numberValue == 1280)
        #expect(result.metadata?["height"]?.numberValue == 720)
        #expect(result.statistics.videoMessages >= 70, "\(result.statistics)")
        #expect(result.statistics.audioMessages >= 100, "\(result.statistics)")
        #expect(result.statistics.unknownMessages == 0)
        // Timestamps are absolute ms: video at 25 fps spans ~3 s and never goes backwards.
        #expect(result.videoTimestamps == result.videoTimestamps.sorted())
        #expect((result.videoTimestamps.last ?? 0) >= 2800 && (result.videoTimestamps.last ?? 0) <= 3100, "\(result.videoTimestamps.suffix(3))")

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rtmp-interop-\(UUID().uuidString).flv")
        try Data(result.flv).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }

        let discover = try await runChild("/usr/bin/gst-discoverer-1.0", [file.path], timeout: 20)
        #expect(discover.status == 0, "gst-discoverer: \(discover.output)")
        #expect(discover.output.contains("H.264"), "\(discover.output)")
        #expect(discover.output.contains("Width: 1280") && discover.output.contains("Height: 720"), "\(discover.output)")
        #expect(discover.output.contains("AAC"), "\(discover.output)")

        let decode = try await runChild("/usr/bin/gst-launch-1.0", [
            "filesrc", "location=\(file.path)", "!", "flvdemux", "name=d", "d.video", "!", "h264parse", "!", "avdec_h264", "!",
            "fakesink", "silent=false", "-v",
        ], timeout: 20)
        #expect(decode.status == 0, "gst-launch: \(decode.output.suffix(2000))")
        let frames = decode.output.components(separatedBy: "\n").filter { $0.contains("chain") && $0.contains("(1382400 bytes") }.count
        #expect(frames >= 60, "decoded \(frames) 1280x720 frames")
        print("RTMP interop: \(result.flv.count) FLV bytes, \(result.statistics.videoMessages) video / \(result.statistics.audioMessages) audio messages, \(frames) frames decoded, ffmpeg \(String(format: "%.2f", ffmpeg.elapsed)) s, ended: \(String(describing: result.ended)), \(result.statistics)")
    }

    @Test("reject() makes ffmpeg fail quickly")
    func rejectedPublish() async throws {
        try #require(Self.available, "needs /usr/bin/ffmpeg")
        let server = try LoopbackRTMPServer()
        async let served = server.serveOne(timeout: 10) { _ in false }
        let ffmpeg = try await runChild("/usr/bin/ffmpeg", try await ffmpegPush(port: server.port, key: "bad-token", seconds: 3), timeout: 10)
        let result = await served
        #expect(ffmpeg.status != 0)
        #expect(!ffmpeg.timedOut)
        #expect(ffmpeg.elapsed < 2.5, "ffmpeg took \(ffmpeg.elapsed) s to give up")
        #expect(ffmpeg.output.contains("Invalid stream key."), "\(ffmpeg.output)")
        #expect(result.publishRequest == "bad-token")
        #expect(result.closedByUs)
        #expect(result.flv.isEmpty)
        #expect(result.statistics.videoMessages == 0)
    }

    @Test("an unknown application is refused at connect and ffmpeg fails quickly")
    func unknownApplication() async throws {
        try #require(Self.available, "needs /usr/bin/ffmpeg")
        let server = try LoopbackRTMPServer()
        async let served = server.serveOne(timeout: 10) { _ in true }
        let ffmpeg = try await runChild("/usr/bin/ffmpeg", try await ffmpegPush(port: server.port, key: "k", seconds: 3, app: "other"), timeout: 10)
        let result = await served
        #expect(ffmpeg.status != 0)
        #expect(ffmpeg.elapsed < 2.5, "ffmpeg took \(ffmpeg.elapsed) s to give up")
        #expect(result.refused == .unknownApplication("other"))
        #expect(result.publishRequest == nil)
    }
}
