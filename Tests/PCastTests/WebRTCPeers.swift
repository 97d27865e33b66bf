import Foundation
import GStreamer
import PCastNode
import PCastTestSupport
import Synchronization

// Standard WebRTC clients that are not ours, driven from the tests: GStreamer's webrtcbin and
// aiortc (Python scripts in scripts/peers); headless Chromium and its report collector live in
// PCastTestSupport (the benchmarks drive it too).

/// The repository's root (scripts live there).
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// A WHIP publisher or WHEP viewer scripted in Python over a WebRTC stack that is not ours, in a
/// process of its own: GStreamer's webrtcbin (`scripts/peers/webrtcbin-peer.py`) or aiortc
/// (`scripts/peers/aiortc-peer.py`). Both scripts take the same arguments and write the same result.
struct ScriptedPeer: Sendable {
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
        /// aiortc only: the negotiated video codec and SRTP protection profile.
        var video_codec: String?
        var srtp_profile: String?
    }

    enum Mode: String, Sendable { case whip, whep }

    enum Stack: String, Sendable {
        case webrtcbin, aiortc

        var script: String { "scripts/peers/\(rawValue)-peer.py" }
        /// python3-gi imports only in Debian's python3, not in a pyenv one first on PATH; aiortc is
        /// installed (scripts/setup.sh) for the python3 on PATH.
        var interpreter: (URL, [String]) {
            switch self {
            case .webrtcbin: (URL(fileURLWithPath: "/usr/bin/python3"), [])
            case .aiortc: (URL(fileURLWithPath: "/usr/bin/env"), ["python3"])
            }
        }
        var installHint: String {
            switch self {
            case .webrtcbin: "scripts/setup.sh installs python3-gi, gstreamer1.0-nice, gir1.2-nice-0.1"
            case .aiortc: "scripts/setup.sh installs aiortc from PyPI"
            }
        }
    }

    let stack: Stack
    let process: ChildProcess
    let resultPath: String
    let logPath: String

    /// Starts it: `seconds` of media after the answer, then DELETE of the resource.
    static func start(_ mode: Mode, _ platform: LocalPlatform, name: String, token: String, seconds: Double,
                      forgeFingerprint: Bool = false, stack: Stack = .webrtcbin) throws -> ScriptedPeer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-\(stack.rawValue)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let script = repositoryRoot.appendingPathComponent(stack.script).path
        let resultPath = directory.appendingPathComponent("result.json").path
        let logPath = directory.appendingPathComponent("peer.log").path
        var environment = ProcessInfo.processInfo.environment
        if forgeFingerprint { environment["PCAST_PEER_FORGE_FINGERPRINT"] = "1" }
        let (interpreter, leading) = stack.interpreter
        let process = try ChildProcess.spawn(interpreter,
                                             leading + ["-u", script, mode.rawValue, "\(platform.httpURL)/\(mode.rawValue)/\(name)", token, String(seconds), resultPath],
                                             environment: environment, output: logPath)
        return ScriptedPeer(stack: stack, process: process, resultPath: resultPath, logPath: logPath)
    }

    /// Waits for it to finish and reads its outcome; a missing peer (exit 3) or a crash fails loudly.
    func outcome() async throws -> Outcome {
        let process = self.process
        let status = await Task.detached { process.wait() }.value
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        if status == 3 {
            throw StandInFailure(description: "\(stack.rawValue) is not usable (\(stack.installHint)): \(log)")
        }
        guard status == 0, let data = FileManager.default.contents(atPath: resultPath) else {
            let written = FileManager.default.contents(atPath: resultPath).map { String(decoding: $0, as: UTF8.self) } ?? "no result"
            throw StandInFailure(description: "the \(stack.rawValue) peer exited with status \(status): \(written.suffix(1_000)) \(log.suffix(2_000))")
        }
        return try JSONDecoder().decode(Outcome.self, from: data)
    }

    /// Kills it at once (no DELETE: its checks simply stop, as when a machine vanishes).
    func kill() { process.stop() }
}

/// A PNG decoded to RGB by GStreamer's `pngdec`, with the share of its pixels in a saturated colour
/// (channels more than 80 apart).
func decodePNG(_ path: String) async throws -> (width: Int, height: Int, saturatedShare: Double) {
    let pipeline = try Pipeline(description: "filesrc location=\(path) ! pngdec ! videoconvert ! video/x-raw,format=RGB ! appsink name=out sync=false")
    let samples = try pipeline.appSink(named: "out").samples(limit: 4, dropping: .dropNewest)
    try await pipeline.runToEnd(timeout: .seconds(20))
    var first: Sample?
    for await sample in samples where first == nil { first = sample }
    guard let sample = first, let info = sample.videoInfo else { throw StandInFailure(description: "pngdec decoded nothing from \(path)") }
    let saturated = try sample.buffer.withUnsafeBytes { bytes in
        var count = 0
        for y in 0..<info.height {
            let row = info.offsets[0] + y * info.strides[0]
            for x in 0..<info.width {
                let r = Int(bytes[row + 3 * x]), g = Int(bytes[row + 3 * x + 1]), b = Int(bytes[row + 3 * x + 2])
                if max(r, g, b) - min(r, g, b) > 80 { count += 1 }
            }
        }
        return count
    }
    return (info.width, info.height, Double(saturated) / Double(max(1, info.width * info.height)))
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
