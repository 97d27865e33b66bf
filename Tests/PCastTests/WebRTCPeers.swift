import Foundation
import PCastNode
import PCastTestSupport
import Synchronization

// Standard WebRTC clients that are not ours, driven from the tests: GStreamer's webrtcbin (a
// Python script in scripts/peers) and headless Chromium on the platform's own page, which reports
// its getStats() figures to a collector here.

/// The repository's root (scripts live there).
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// `scripts/peers/webrtcbin-peer.py` as a WHIP publisher or a WHEP viewer, in a process of its own.
struct WebRTCBinPeer: Sendable {
    /// What the script wrote when it was done.
    struct Outcome: Decodable, Sendable {
        var status: Int
        var location: String?
        var answer: String?
        var error: String?
        var video_frames: Int
        var audio_buffers: Int
        var width: Int
        var height: Int
        var delete_status: Int
        var ice_state: String?
        var connection_state: String?
    }

    enum Mode: String, Sendable { case whip, whep }

    let process: ChildProcess
    let resultPath: String
    let logPath: String

    /// Starts it: `seconds` of media after the answer, then DELETE of the resource.
    static func start(_ mode: Mode, _ platform: LocalPlatform, name: String, token: String, seconds: Double,
                      forgeFingerprint: Bool = false) throws -> WebRTCBinPeer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-webrtcbin-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let script = repositoryRoot.appendingPathComponent("scripts/peers/webrtcbin-peer.py").path
        let resultPath = directory.appendingPathComponent("result.json").path
        let logPath = directory.appendingPathComponent("peer.log").path
        var environment = ProcessInfo.processInfo.environment
        if forgeFingerprint { environment["PCAST_PEER_FORGE_FINGERPRINT"] = "1" }
        // python3-gi imports only in Debian's python3, not in a pyenv one first on PATH.
        let process = try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/python3"),
                                             ["-u", script, mode.rawValue, "\(platform.httpURL)/\(mode.rawValue)/\(name)", token, String(seconds), resultPath],
                                             environment: environment, output: logPath)
        return WebRTCBinPeer(process: process, resultPath: resultPath, logPath: logPath)
    }

    /// Waits for it to finish and reads its outcome; a missing peer (exit 3) or a crash fails loudly.
    func outcome() async throws -> Outcome {
        let process = self.process
        let status = await Task.detached { process.wait() }.value
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        if status == 3 {
            throw StandInFailure(description: "webrtcbin is not usable (scripts/setup.sh installs python3-gi, gstreamer1.0-nice, gir1.2-nice-0.1): \(log)")
        }
        guard status == 0, let data = FileManager.default.contents(atPath: resultPath) else {
            throw StandInFailure(description: "the webrtcbin peer exited with status \(status): \(log.suffix(2_000))")
        }
        return try JSONDecoder().decode(Outcome.self, from: data)
    }

    /// Kills it at once (no DELETE: its checks simply stop, as when a machine vanishes).
    func kill() { process.stop() }
}

/// Headless Chromium (Debian's `chromium`) with a fake camera and microphone, on one page.
struct HeadlessChromium: Sendable {
    let process: ChildProcess
    let profile: URL

    static func open(_ url: String) throws -> HeadlessChromium {
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-chromium-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: profile, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = profile.path
        let process = try ChildProcess.spawn(try executable("chromium"), [
            "--headless=new", "--no-sandbox", "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            "--autoplay-policy=no-user-gesture-required", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--user-data-dir=\(profile.path)", url,
        ], environment: environment)
        return HeadlessChromium(process: process, profile: profile)
    }

    func close() {
        process.interrupt(grace: .seconds(3))
        try? FileManager.default.removeItem(at: profile)
    }
}

/// A small HTTP server on 127.0.0.1 that keeps the JSON bodies POSTed to it (the page's figures,
/// sent as simple `text/plain` requests so no CORS preflight is needed).
final class ReportCollector: Sendable {
    let port: UInt16
    private let descriptor: Int32
    private let reports = Mutex<[[String: any Sendable]]>([])
    private let stopped = Atomic<Bool>(false)

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            Glibc.close(fd)
            throw StandInFailure(description: "the report collector cannot listen: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        descriptor = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in self.serve() }
        thread.start()
    }

    var url: String { "http://127.0.0.1:\(port)/" }

    /// Every report so far from `panel` (`watch` or `publish`), oldest first.
    func reports(_ panel: String) -> [[String: any Sendable]] {
        reports.withLock { $0.filter { ($0["panel"] as? String) == panel } }
    }

    func latest(_ panel: String) -> [String: any Sendable]? { reports(panel).last }

    func close() {
        stopped.store(true, ordering: .relaxed)
        shutdown(descriptor, Int32(SHUT_RDWR))
        Glibc.close(descriptor)
    }

    private func serve() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(descriptor, nil, nil)
            guard client >= 0 else {
                if stopped.load(ordering: .relaxed) { return }
                continue
            }
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var request = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 16_384)
            while true {
                let count = read(client, &buffer, buffer.count)
                if count <= 0 { break }
                request += buffer[0..<count]
                if let body = Self.body(of: request) {
                    if let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] {
                        let report = object.mapValues { Self.sendable($0) }
                        reports.withLock { $0.append(report) }
                    }
                    break
                }
            }
            let reply = "HTTP/1.1 204 No Content\r\nAccess-Control-Allow-Origin: *\r\nConnection: close\r\n\r\n"
            _ = reply.withCString { write(client, $0, strlen($0)) }
            Glibc.close(client)
        }
    }

    /// The body once the whole request (headers and Content-Length bytes) is in.
    private static func body(of request: [UInt8]) -> [UInt8]? {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = (0...max(0, request.count - 4)).first(where: { request.count >= 4 && Array(request[$0..<$0 + 4]) == separator }) else { return nil }
        let head = String(decoding: request[0..<end], as: UTF8.self).lowercased()
        let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
        let body = request[(end + 4)...]
        return body.count >= length ? Array(body.prefix(length)) : nil
    }

    private static func sendable(_ value: Any) -> any Sendable {
        switch value {
        case let number as NSNumber: return number.doubleValue
        case let string as String: return string
        default: return "\(value)"
        }
    }
}

extension Dictionary where Key == String, Value == any Sendable {
    func number(_ key: String) -> Double { (self[key] as? Double) ?? 0 }
    func string(_ key: String) -> String { (self[key] as? String) ?? "" }
}

/// POSTs with curl (URLSession stalls on some refusals here): status, content type and body.
func curlRequest(_ method: String, _ url: String, contentType: String? = "application/sdp", token: String?,
                 body: String?) throws -> (status: Int, contentType: String, body: String, headers: String) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-curl-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let bodyPath = directory.appendingPathComponent("body").path
    let answerPath = directory.appendingPathComponent("answer").path
    let headersPath = directory.appendingPathComponent("headers").path
    var arguments = ["-s", "-o", answerPath, "-D", headersPath, "-w", "%{http_code} %{content_type}", "-X", method]
    if let contentType { arguments += ["-H", "Content-Type: \(contentType)"] }
    if let body {
        try body.write(toFile: bodyPath, atomically: true, encoding: .utf8)
        arguments += ["--data-binary", "@\(bodyPath)"]
    }
    if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
    arguments.append(url)
    let output = directory.appendingPathComponent("out").path
    let process = try ChildProcess.spawn(try executable("curl"), arguments, environment: ProcessInfo.processInfo.environment, output: output)
    _ = process.wait()
    let written = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    let parts = written.split(separator: " ", maxSplits: 1)
    return (Int(parts.first ?? "") ?? 0, parts.count > 1 ? String(parts[1]) : "",
            (try? String(contentsOfFile: answerPath, encoding: .utf8)) ?? "",
            (try? String(contentsOfFile: headersPath, encoding: .utf8)) ?? "")
}

/// A browser-style offer (H.264 42e01f and Opus, with SSRCs when it sends) for requests whose peer
/// never connects; `video` replaces the video codec lines (a VP8-only offer, say).
func browserOffer(video: [String] = ["a=rtpmap:102 H264/90000", "a=rtcp-fb:102 nack", "a=rtcp-fb:102 nack pli",
                                     "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"],
                  videoPayloadTypes: String = "102", direction: String = "sendonly", iceUfrag: String = "Fq3x") -> String {
    let fingerprint = (0..<32).map { String(format: "%02X", $0 * 7 % 256) }.joined(separator: ":")
    func section(_ kind: String, mid: String, payloadTypes: String, codec: [String], ssrc: Int) -> [String] {
        ["m=\(kind) 9 UDP/TLS/RTP/SAVPF \(payloadTypes)", "c=IN IP4 0.0.0.0", "a=ice-ufrag:\(iceUfrag)",
         "a=ice-pwd:nd2pQ4mPTYgXzPZ2g2lCcx1N", "a=fingerprint:sha-256 \(fingerprint)", "a=setup:actpass", "a=mid:\(mid)",
         "a=\(direction)", "a=rtcp-mux", "a=rtcp-rsize"] + codec + (direction == "sendonly" ? ["a=ssrc:\(ssrc) cname:browser"] : [])
    }
    let lines = ["v=0", "o=- 4611731400430051336 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1"]
        + section("audio", mid: "0", payloadTypes: "111", codec: ["a=rtpmap:111 opus/48000/2", "a=fmtp:111 minptime=10;useinbandfec=1"], ssrc: 1001)
        + section("video", mid: "1", payloadTypes: videoPayloadTypes, codec: video, ssrc: 2002)
    return lines.joined(separator: "\r\n") + "\r\n"
}
