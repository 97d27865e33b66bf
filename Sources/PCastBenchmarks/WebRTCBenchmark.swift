import Foundation
import Glibc
import PCast
import PCastMedia
import PCastNode
import PCastTestSupport
import Synchronization

/// The standard-WebRTC figures (`pcast-bench webrtc`), through an embedded platform with
/// headless Chromium as the viewer:
/// - **WHEP → first frame**: the platform's own page opened with `?watch=`, from its WHEP request
///   (offer, POST, ICE, DTLS, the keyframe the relay asks for) to the first frame the browser
///   presents (`requestVideoFrameCallback`), fresh browser each run;
/// - **glass-to-glass, SDK publisher → Chromium**: the publisher paints a frame counter
///   (``FrameStamp``) into each 720p frame before the encoder and notes the wall-clock time; a
///   page of the benchmark's own reads the counter back from a canvas in the browser's
///   `requestVideoFrameCallback` and reports the frame's expected display time. Same machine,
///   same clock. An SDK subscriber of the same stream reads the same counters at its
///   post-decoder hook (not at a screen: before its sink's playout delay), as a reference;
/// - **per-viewer relay cost**: ``RelayFanoutBenchmark`` with SDK subscribers and with WebRTC
///   viewers (ICE + DTLS handshakes measured, then the same fan-out), in the same run.
public struct WebRTCBenchmark {
    public struct FirstFrame: Codable, Sendable {
        public var runs: [Double]
        public var p50: Double
        public var maximum: Double
        /// The steps on the way, p50 of each, milliseconds after the request started: the offer
        /// made (fresh browsers: not reported), the answer received, ICE connected, DTLS
        /// connected (connectionState), the video track.
        public var offerP50: Double?
        public var answerP50: Double?
        public var iceConnectedP50: Double?
        public var connectedP50: Double?
        public var trackP50: Double?
        public static let goalP50 = 300.0

        /// From the pages' reports, one per run (`firstFrameMs`, `offerMs`, `answerMs`, …).
        public init(reports: [[String: any Sendable]]) {
            func median(_ key: String) -> Double? {
                let values = reports.filter { $0[key] != nil }.map { $0.number(key) }.sorted()
                return values.isEmpty ? nil : values[values.count / 2]
            }
            runs = reports.map { $0.number("firstFrameMs") }
            p50 = median("firstFrameMs") ?? 0
            maximum = runs.max() ?? 0
            offerP50 = median("offerMs")
            answerP50 = median("answerMs")
            iceConnectedP50 = median("iceConnectedMs")
            connectedP50 = median("connectedMs")
            trackP50 = median("trackMs")
        }
    }

    public struct GlassToGlass: Codable, Sendable {
        public var width: Int
        public var height: Int
        /// Frames whose counter the browser read back in the measured window.
        public var frames: Int
        /// Stamp → expected display time in Chromium, milliseconds.
        public var p50: Double
        public var p90: Double
        public var p99: Double
        /// Stamp → the frame handed to the compositor (`presentationTime`), p50.
        public var presentedP50: Double
        /// Chromium's own figures over the window: jitter buffer and decode per frame.
        public var jitterBufferMilliseconds: Double
        public var decodeMilliseconds: Double
        /// The reference: an SDK subscriber's post-decoder hook, p50 and p99 (default playout delay).
        public var sdkHookP50: Double
        public var sdkHookP99: Double
        public static let goalP50 = 60.0
    }

    public struct Result: Codable, Sendable {
        /// Sessions one after another in one browser (its WebRTC stack warm).
        public var firstFrame: FirstFrame
        /// The platform's page in a fresh browser each run (the browser's own start included).
        public var firstFrameFreshBrowser: FirstFrame
        public var glassToGlass: GlassToGlass
        /// SDK subscribers and WebRTC viewers at each count, in that order.
        public var fanout: [RelayFanoutBenchmark.Result]
    }

    public enum Failure: Error, CustomStringConvertible {
        case browser(String)
        public var description: String {
            switch self { case .browser(let why): "Chromium: \(why)" }
        }
    }

    public var firstFrameRuns = 10
    public var seconds: Double = 10
    public var fanoutCounts: [Int] = [100, 500, 1000]

    public func run() async throws -> Result {
        let platform = try await LocalPlatform.start()
        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await publisherSDK.getUserMedia(.synthetic(width: 1280, height: 720))
        let stamps = StampClock()
        try media.setFrameReadyCallback(media.mediaStream.getVideoTracks()[0]) { notification in
            guard case .video(var frame)? = try? notification.read() else { return }
            FrameStamp.paint(stamps.next(), into: &frame)
            try? notification.write(.video(frame))
        }
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:bench"])

        let firstFrame = try await measureFirstFrames(platform)
        let fresh = try await measureFirstFrameInFreshBrowsers(platform)
        let glass = try await measureGlassToGlass(platform, streamId: publisher.streamId, stamps: stamps)
        await publisher.stop()
        await media.stop()
        await publisherSDK.stop()
        await platform.shutdown()

        var fanout: [RelayFanoutBenchmark.Result] = []
        for count in fanoutCounts {
            var configuration = RelayFanoutBenchmark.Configuration(subscribers: count, duration: 5)
            fanout.append(try RelayFanoutBenchmark(configuration: configuration).run())
            configuration.webRTCViewers = true
            fanout.append(try RelayFanoutBenchmark(configuration: configuration).run())
        }
        return Result(firstFrame: firstFrame, firstFrameFreshBrowser: fresh, glassToGlass: glass, fanout: fanout)
    }

    /// The benchmark's page, `joins=N`: N WHEP sessions one after another in one browser.
    private func measureFirstFrames(_ platform: LocalPlatform) async throws -> FirstFrame {
        let collector = try ReportCollector(page: Self.page)
        defer { collector.close() }
        var query = URLComponents(string: collector.url)!
        query.queryItems = [
            URLQueryItem(name: "whep", value: platform.httpURL + "/whep/bench"),
            URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("bench"))),
            URLQueryItem(name: "report", value: collector.url),
            // One more than measured: the first session also starts the browser's WebRTC stack.
            URLQueryItem(name: "joins", value: String(firstFrameRuns + 1)),
        ]
        let browser = try HeadlessChromium.open(query.url!.absoluteString)
        defer { browser.close() }
        let deadline = ContinuousClock.now + .seconds(Double(firstFrameRuns) * 5 + 30)
        while collector.reports("join").count < firstFrameRuns + 1 {
            if let error = collector.reports("error").first { throw Failure.browser(error.string("error")) }
            guard ContinuousClock.now < deadline else { throw Failure.browser("\(collector.reports("join").count) of \(firstFrameRuns + 1) sessions reached a frame") }
            try await Task.sleep(for: .milliseconds(100))
        }
        return FirstFrame(reports: Array(collector.reports("join").dropFirst()))
    }

    /// The platform's own page, `?watch=bench`, in a fresh browser each run.
    private func measureFirstFrameInFreshBrowsers(_ platform: LocalPlatform) async throws -> FirstFrame {
        var reports: [[String: any Sendable]] = []
        for _ in 0..<max(3, firstFrameRuns / 2) {
            let collector = try ReportCollector()
            defer { collector.close() }
            var query = URLComponents(string: platform.httpURL + "/")!
            query.queryItems = [
                URLQueryItem(name: "watch", value: "bench"),
                URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("bench"))),
                URLQueryItem(name: "report", value: collector.url),
            ]
            let browser = try HeadlessChromium.open(query.url!.absoluteString)
            defer { browser.close() }
            let deadline = ContinuousClock.now + .seconds(30)
            var measured: [String: any Sendable]?
            while measured == nil && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                if let error = collector.reports("watch").first(where: { $0["error"] != nil }) {
                    throw Failure.browser(error.string("error"))
                }
                measured = collector.reports("watch").first { $0["firstFrameMs"] != nil }
            }
            guard let measured else { throw Failure.browser("no frame within 30 s of opening the page") }
            reports.append(measured)
        }
        return FirstFrame(reports: reports)
    }

    private func measureGlassToGlass(_ platform: LocalPlatform, streamId: String, stamps: StampClock) async throws -> GlassToGlass {
        // The reference: an SDK subscriber reading the counters at its post-decoder hook.
        let viewerSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await viewerSDK.start(authToken: try platform.token(.auth))
        let stream = try await viewerSDK.subscribe(streamToken: try platform.token(.stream, originStreamId: streamId))
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        _ = await renderer.start()
        let hookLatencies = Mutex<[Double]?>(nil)
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
            guard case .video(let frame)? = try? notification.read(), let value = FrameStamp.read(frame),
                  let stamped = stamps.time(of: value) else { return }
            let latency = StampClock.nowMilliseconds() - stamped
            hookLatencies.withLock { $0?.append(latency) }
        }

        let collector = try ReportCollector(page: Self.page)
        defer { collector.close() }
        var query = URLComponents(string: collector.url)!
        query.queryItems = [
            URLQueryItem(name: "whep", value: platform.httpURL + "/whep/" + streamId),
            URLQueryItem(name: "token", value: try platform.token(.stream, originStreamId: streamId)),
            URLQueryItem(name: "report", value: collector.url),
        ]
        let browser = try HeadlessChromium.open(query.url!.absoluteString)
        defer { browser.close() }
        // Warm up: connected, a few seconds of frames (the jitter buffer settles).
        let deadline = ContinuousClock.now + .seconds(30)
        while collector.reports("stamps").count < 3 {
            if let error = collector.reports("error").first { throw Failure.browser(error.string("error")) }
            guard ContinuousClock.now < deadline else { throw Failure.browser("no counters read back within 30 s") }
            try await Task.sleep(for: .milliseconds(100))
        }
        let skip = collector.reports("stamps").count
        hookLatencies.withLock { $0 = [] }
        try await Task.sleep(for: .seconds(seconds))
        let reports = Array(collector.reports("stamps").dropFirst(skip))
        let hook = (hookLatencies.withLock { $0 } ?? []).sorted()
        await renderer.stop()
        await stream.stop()
        await viewerSDK.stop()

        var displayed: [Double] = [], presented: [Double] = []
        for report in reports {
            let values = report.numbers("values"), display = report.numbers("displayed"), presentation = report.numbers("presented")
            for (index, value) in values.enumerated() where index < display.count && index < presentation.count {
                guard let stamped = stamps.time(of: UInt32(value)) else { continue }
                displayed.append(display[index] - stamped)
                presented.append(presentation[index] - stamped)
            }
        }
        guard !displayed.isEmpty else { throw Failure.browser("no counters read back in the measured window") }
        displayed.sort()
        presented.sort()
        func percentile(_ values: [Double], _ p: Double) -> Double {
            values.isEmpty ? .nan : values[min(values.count - 1, max(0, Int((p / 100 * Double(values.count)).rounded(.up)) - 1))]
        }
        let last = reports.last
        return GlassToGlass(width: 1280, height: 720, frames: displayed.count,
                            p50: percentile(displayed, 50), p90: percentile(displayed, 90), p99: percentile(displayed, 99),
                            presentedP50: percentile(presented, 50),
                            jitterBufferMilliseconds: last?.number("jitterBufferMs") ?? .nan,
                            decodeMilliseconds: last?.number("decodeMs") ?? .nan,
                            sdkHookP50: percentile(hook, 50), sdkHookP99: percentile(hook, 99))
    }

    /// "offer 12, answer 20, …, first frame 150 (runs: …)".
    public static func steps(_ f: FirstFrame) -> String {
        let named: [(String, Double?)] = [("offer", f.offerP50), ("answer", f.answerP50), ("track", f.trackP50),
                                          ("ICE connected", f.iceConnectedP50), ("DTLS connected", f.connectedP50), ("first frame", f.p50)]
        return named.compactMap { name, value in value.map { String(format: "%@ %.0f", name, $0) } }.joined(separator: ", ")
            + " (runs: " + f.runs.map { String(format: "%.0f", $0) }.joined(separator: ", ") + ")"
    }

    public static func markdown(_ result: Result) -> String {
        let f = result.firstFrame, fresh = result.firstFrameFreshBrowser, g = result.glassToGlass
        var lines = [
            "## Standard WebRTC: headless Chromium viewing an SDK publisher's 720p30 H.264 through the embedded platform",
            "",
            "| figure | p50 | p90 | p99 / max | goal |",
            "|---|---:|---:|---:|---:|",
            String(format: "| WHEP request → first frame presented, ms (%d sessions in one browser) | %.0f | | %.0f | ≤ %.0f |",
                   f.runs.count, f.p50, f.maximum, FirstFrame.goalP50),
            String(format: "| the same with the platform's page in a fresh browser each time, ms (%d) | %.0f | | %.0f | |",
                   fresh.runs.count, fresh.p50, fresh.maximum),
            String(format: "| glass-to-glass, SDK publisher → Chromium's display, ms (%d frames) | %.1f | %.1f | %.1f | ≤ %.0f |",
                   g.frames, g.p50, g.p90, g.p99, GlassToGlass.goalP50),
            String(format: "| … to the compositor (presentationTime), ms | %.1f | | | |", g.presentedP50),
            String(format: "| reference: SDK subscriber, post-decoder hook (before its playout delay), ms | %.1f | | %.1f | |", g.sdkHookP50, g.sdkHookP99),
            "",
            "On the way to the first frame (p50, ms after the request started), one browser: \(steps(f)); fresh browsers: \(steps(fresh)).",
            "",
            String(format: "Chromium's jitter buffer: %.1f ms a frame; decode %.1f ms.", g.jitterBufferMilliseconds, g.decodeMilliseconds),
            "",
            "## Relay cost per viewer: SDK subscribers and WebRTC viewers (ICE + DTLS, payload type rewritten), one 2.5 Mbit/s stream, same run",
            "",
            "| viewers | kind | relay CPU % | per core | loss % | reference CPU % | ratio | handshake CPU ms / viewer | handshakes / core·s | handshake wall p50 ms |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in result.fanout {
            let kind = row.configuration.webRTCViewers ? "WebRTC" : "SDK"
            let handshake = row.handshakes.map {
                String(format: "%.2f | %.0f | %.1f", $0.relayCPUMillisecondsPerViewer, $0.handshakesPerCoreSecond, $0.wallP50Milliseconds)
            } ?? "– | – | –"
            lines.append(String(format: "| %d | %@ | %.1f | %.0f | %.3f | %@ | %@ | %@ |",
                                row.configuration.subscribers, kind, row.relay.cpuPercent, row.relay.subscribersPerCore, row.relay.lossPercent,
                                row.reference.map { String(format: "%.1f", $0.cpuPercent) } ?? "–",
                                row.cpuRatio.map { String(format: "%.2f×", $0) } ?? "–", handshake))
        }
        lines.append("")
        return lines.joined(separator: "\n")
    }

    /// The glass-to-glass page: WHEP (H.264 42e01f preferred), then, for each frame the browser
    /// presents, the stamp read back from the top-left 128 × 64 pixels drawn on a canvas.
    public static let page = #"""
    <!DOCTYPE html>
    <html><head><meta charset="utf-8"><title>PCastKit glass-to-glass</title></head>
    <body style="margin:0;background:#000">
    <video id="v" autoplay muted playsinline style="width:640px"></video>
    <canvas id="c" width="128" height="64" style="display:none"></canvas>
    <script>
    const q = new URLSearchParams(location.search);
    const video = document.getElementById('v');
    const context = document.getElementById('c').getContext('2d', { willReadFrequently: true });
    let values = [], displayed = [], presented = [];
    function post(body) { fetch(q.get('report'), { method: 'POST', body: JSON.stringify(body) }).catch(() => {}); }
    // FrameStamp: 8 × 4 blocks of 16 pixels, 24 bits of counter then 8 of checksum, white = 1.
    function readStamp() {
      context.drawImage(video, 0, 0, 128, 64, 0, 0, 128, 64);
      const d = context.getImageData(0, 0, 128, 64).data;
      let bits = 0;
      for (let bit = 0; bit < 32; bit++) {
        const x0 = (bit % 8) * 16 + 4, y0 = Math.floor(bit / 8) * 16 + 4;
        let sum = 0;
        for (let y = y0; y < y0 + 8; y++) for (let x = x0; x < x0 + 8; x++) {
          const i = (y * 128 + x) * 4; sum += 0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2];
        }
        bits = bits * 2 + (sum / 64 > 125 ? 1 : 0);
      }
      const value = Math.floor(bits / 256), check = bits % 256;
      return ((value & 0xFF) + ((value >> 8) & 0xFF) + ((value >> 16) & 0xFF) + 0x5A) % 256 === check ? value : null;
    }
    function onFrame(now, meta) {
      const value = readStamp();
      if (value !== null) {
        values.push(value);
        displayed.push(performance.timeOrigin + meta.expectedDisplayTime);
        presented.push(performance.timeOrigin + meta.presentationTime);
      }
      video.requestVideoFrameCallback(onFrame);
    }
    const fits = (c) => c.mimeType.toLowerCase() === 'video/h264' && /packetization-mode=1/.test(c.sdpFmtpLine || '') &&
      /profile-level-id=42e01f/i.test(c.sdpFmtpLine || '');
    // A WHEP session (video and audio, H.264 42e01f preferred) whose steps are marked in `steps`,
    // milliseconds after `started`; resolves with the peer connection and the session's URL.
    async function watch(steps, started) {
      const mark = (step) => { if (steps[step] === undefined) steps[step] = performance.now() - started; };
      const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
      pc.oniceconnectionstatechange = () => { if (pc.iceConnectionState === 'connected') mark('iceConnectedMs'); };
      pc.onconnectionstatechange = () => { if (pc.connectionState === 'connected') mark('connectedMs'); };
      const transceiver = pc.addTransceiver('video', { direction: 'recvonly' });
      pc.addTransceiver('audio', { direction: 'recvonly' });
      const codecs = RTCRtpReceiver.getCapabilities('video').codecs;
      transceiver.setCodecPreferences(codecs.filter(fits).concat(codecs.filter((c) => !fits(c))));
      pc.ontrack = (event) => { if (event.track.kind === 'video') { video.srcObject = new MediaStream([event.track]); mark('trackMs'); } };
      await pc.setLocalDescription(await pc.createOffer());
      mark('offerMs');
      const response = await fetch(q.get('whep'), { method: 'POST', body: pc.localDescription.sdp,
        headers: { 'Content-Type': 'application/sdp', 'Authorization': 'Bearer ' + q.get('token') } });
      const answer = await response.text();
      if (response.status !== 201) throw new Error(response.status + ' ' + answer);
      mark('answerMs');
      await pc.setRemoteDescription({ type: 'answer', sdp: answer });
      return { pc, resource: new URL(response.headers.get('Location'), q.get('whep')).toString() };
    }
    // joins=N: N sessions one after another in this (warm) browser, each to its first frame.
    async function joins(count) {
      for (let run = 0; run < count; run++) {
        const steps = {}, started = performance.now();
        const firstFrame = new Promise((resolve) => video.requestVideoFrameCallback(() => resolve(performance.now() - started)));
        const session = await watch(steps, started);
        steps.firstFrameMs = await firstFrame;
        post(Object.assign({ panel: 'join', run }, steps));
        await fetch(session.resource, { method: 'DELETE', headers: { 'Authorization': 'Bearer ' + q.get('token') } });
        session.pc.close();
        video.srcObject = null;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    // Otherwise: one session, and each presented frame's stamp with its display time.
    async function stamps() {
      const session = await watch({}, performance.now());
      video.requestVideoFrameCallback(onFrame);
      setInterval(async () => {
        const out = { panel: 'stamps', values, displayed, presented };
        values = []; displayed = []; presented = [];
        (await session.pc.getStats()).forEach((s) => {
          if (s.type === 'inbound-rtp' && s.kind === 'video') {
            if (s.jitterBufferEmittedCount > 0) out.jitterBufferMs = 1000 * s.jitterBufferDelay / s.jitterBufferEmittedCount;
            if (s.framesDecoded > 0) out.decodeMs = 1000 * s.totalDecodeTime / s.framesDecoded;
          }
        });
        post(out);
      }, 1000);
    }
    async function main() { if (q.get('joins')) await joins(Number(q.get('joins'))); else await stamps(); }
    main().catch((error) => post({ panel: 'error', error: String(error.message || error) }));
    </script>
    </body></html>
    """#

    public init(seconds: Double = 10, fanoutCounts: [Int] = [100, 500, 1000]) {
        self.seconds = seconds
        self.fanoutCounts = fanoutCounts
    }
}

/// Frame counters and the wall-clock time each was painted (milliseconds since 1970, as the
/// browser's `performance.timeOrigin + …` counts them).
public final class StampClock: Sendable {
    private let state = Mutex<(next: UInt32, times: [UInt32: Double])>((1, [:]))

    public static func nowMilliseconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) * 1_000 + Double(now.tv_nsec) / 1e6
    }

    /// The next counter, its time noted (the last 10 minutes' worth are kept).
    public func next() -> UInt32 {
        let now = Self.nowMilliseconds()
        return state.withLock { state in
            let value = state.next
            state.next = (state.next + 1) & 0xFF_FFFF
            state.times[value] = now
            if state.times.count > 18_000 { state.times[(value &- 18_000) & 0xFF_FFFF] = nil }
            return value
        }
    }

    public func time(of value: UInt32) -> Double? { state.withLock { $0.times[value] } }
}
