import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import PCastTestSupport
import Testing

/// The rows of MediaGuide's stock-pipeline table, each template run with its own elements.
@Suite("Stock pipelines do what MediaGuide's table says")
struct StockPipelineRowsTests {
    @Test("test-pattern.pipeline: its only source is a videotestsrc, its only sink a fakesink, and it runs to its end")
    func testPattern() async throws {
        let text = try StockPipelines.template("test-pattern").render(["frames": "5", "width": "64", "height": "48", "sync": "false"])
        let pipeline = try Pipeline(description: text)
        #expect(pipeline.elements.filter(\.isSource).map(\.factoryName) == ["videotestsrc"])
        #expect(pipeline.sinks.map(\.factoryName) == ["fakesink"])
        try await pipeline.runToEnd(timeout: .seconds(20))
        await pipeline.stop()
    }

    @Test("user-media-video.pipeline: RGB 320×240 at 30 fps in front of it reaches the hook as I420 160×120, and the tee hands on I420 160×120 at 15 fps")
    func userMediaVideo() async throws {
        let text = try StockPipelines.template("user-media-video").render(["width": "160", "height": "120", "framerate": "15/1"])
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=20 ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 ! \(text)
            video-tee. ! queue ! appsink name=out sync=false
            """)
        let hook = try FrameHook(pipeline: pipeline, element: "video-hook")
        let seen = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            if let frame = try? notification.read().video { seen.append("\(frame.format) \(frame.width)x\(frame.height)") }
        }
        let samples = try await runCollecting(pipeline)
        await pipeline.stop()
        #expect(!seen.all.isEmpty)
        #expect(Set(seen.all) == ["I420 160x120"], "\(Set(seen.all))")
        #expect(!samples.isEmpty)
        for sample in samples {
            let caps = sample.caps?.description ?? ""
            #expect(caps.contains("I420") && caps.contains("width=(int)160") && caps.contains("height=(int)120") && caps.contains("framerate=(fraction)15/1"), "\(caps)")
        }
    }

    @Test("user-media-audio.pipeline: F32 stereo 44.1 kHz in front of it reaches the hook as S16 mono 16 kHz, and the tee hands on S16LE mono 16 kHz")
    func userMediaAudio() async throws {
        let text = try StockPipelines.template("user-media-audio").render(["rate": "16000", "channels": "1"])
        let pipeline = try Pipeline(description: """
            audiotestsrc num-buffers=10 ! audio/x-raw,format=F32LE,rate=44100,channels=2 ! \(text)
            audio-tee. ! queue ! appsink name=out sync=false
            """)
        let hook = try FrameHook(pipeline: pipeline, element: "audio-hook")
        let seen = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            if let frame = try? notification.read().audio { seen.append("\(frame.format) \(frame.channels) \(frame.sampleRate)") }
        }
        let samples = try await runCollecting(pipeline)
        await pipeline.stop()
        #expect(!seen.all.isEmpty)
        #expect(Set(seen.all) == ["\(AudioSampleFormat.s16) 1 16000"], "\(Set(seen.all))")
        #expect(!samples.isEmpty)
        for sample in samples {
            let caps = sample.caps?.description ?? ""
            #expect(caps.contains("S16LE") && caps.contains("rate=(int)16000") && caps.contains("channels=(int)1"), "\(caps)")
        }
    }

    /// Runs a publish template fed by `source` and returns the RTP and RTCP packets its appsinks gave.
    func publish(_ name: String, source: String, ssrc: UInt32, values: [String: String] = [:]) async throws -> (rtp: [[UInt8]], rtcp: [[UInt8]], caps: String) {
        let text = try StockPipelines.template(name).render(["prefix": "p", "ssrc": "\(ssrc)"].merging(values) { $1 })
        let pipeline = try Pipeline(description: text + "\n" + source)
        let rtp = Recorder<[UInt8]>()
        let rtcp = Recorder<[UInt8]>()
        let caps = Recorder<String>()
        try pipeline.appSink(named: "p-rtp-out").onSample { sample in
            rtp.append(sample.buffer.bytes)
            if let description = sample.caps?.description { caps.append(description) }
        }
        try pipeline.appSink(named: "p-rtcp-out").onSample { rtcp.append($0.buffer.bytes) }
        try await pipeline.play()
        #expect(await eventually(.seconds(20)) { rtp.all.count >= 5 && !rtcp.all.isEmpty }, "\(rtp.all.count) RTP, \(rtcp.all.count) RTCP packets")
        await pipeline.stop()
        return (rtp.all, rtcp.all, caps.all.last ?? "")
    }

    func ssrc(_ packet: [UInt8]) -> UInt32 {
        packet.count >= 12 ? packet[8..<12].reduce(0) { $0 << 8 | UInt32($1) } : 0
    }

    @Test("publish-video.pipeline: raw video into its valve comes out of the RTP appsink as H.264 RTP (version 2, payload type 96, the asked SSRC), and RTCP (version 2, types 200–204) out of the RTCP appsink")
    func publishVideo() async throws {
        // The template leaves the codec's elements to the SDK (`VideoCodec`): here, H.264 as its
        // `gst-launch-1.0` line has them.
        let out = try await publish("publish-video", source: "videotestsrc is-live=true ! video/x-raw,format=I420,width=160,height=120,framerate=30/1 ! p-valve.", ssrc: 4242, values: [
            "encoder": "x264enc name=p-encoder tune=zerolatency speed-preset=ultrafast bitrate=500 key-int-max=30",
            "payloader": "rtph264pay name=p-payloader pt=96 ssrc=4242 config-interval=-1 mtu=1200 aggregate-mode=zero-latency",
        ])
        #expect(out.caps.contains("H264"), "\(out.caps)")
        #expect(!out.rtp.isEmpty && out.rtp.allSatisfy { $0.count > 12 && $0[0] >> 6 == 2 && $0[1] & 0x7f == 96 && ssrc($0) == 4242 })
        #expect(!out.rtcp.isEmpty && out.rtcp.allSatisfy { $0.count >= 8 && $0[0] >> 6 == 2 && (200...204).contains($0[1]) })
    }

    @Test("publish-audio.pipeline: raw audio into its queue comes out of the RTP appsink as Opus RTP (version 2, payload type 111, the asked SSRC), and RTCP (version 2, types 200–204) out of the RTCP appsink")
    func publishAudio() async throws {
        let out = try await publish("publish-audio", source: "audiotestsrc is-live=true ! p-queue.", ssrc: 4343)
        #expect(out.caps.uppercased().contains("OPUS"), "\(out.caps)")
        #expect(!out.rtp.isEmpty && out.rtp.allSatisfy { $0.count > 12 && $0[0] >> 6 == 2 && $0[1] & 0x7f == 111 && ssrc($0) == 4343 })
        #expect(!out.rtcp.isEmpty && out.rtcp.allSatisfy { $0.count >= 8 && $0[0] >> 6 == 2 && (200...204).contains($0[1]) })
    }
}

@Suite("User media: how a stream ends, and the screen without a display")
struct UserMediaEndClaimsTests {
    func pipelineOptions(_ description: String) -> UserMediaOptions {
        var options = syntheticOptions(width: 160, height: 120)
        options.video.deviceId = nil
        options.video.source = .pipeline(description)
        return options
    }

    @Test("a source that plays out ends the stream once, as endOfStream: the ended callback runs once, ended() gives the same reason, and a later stop() leaves it as it was")
    func endsOnce() async throws {
        let media = try await UserMedia.getUserMedia(pipelineOptions("videotestsrc is-live=true num-buffers=30"))
        let reasons = Recorder<MediaStreamEndReason>()
        media.mediaStream.setStreamEndedCallback { reasons.append($0) }
        #expect(await eventually(.seconds(20)) { media.mediaStream.endReason != nil })
        await media.stop()
        #expect(media.mediaStream.endReason == .endOfStream)
        #expect(await media.mediaStream.ended() == .endOfStream)
        #expect(reasons.all == [.endOfStream])
    }

    @Test("a source that fails after its first frames ends the stream as failed, once: a later stop() leaves the reason as it was")
    func failedSourceEndsAsFailed() async throws {
        let media = try await UserMedia.getUserMedia(pipelineOptions("videotestsrc is-live=true ! identity error-after=30"))
        let reasons = Recorder<MediaStreamEndReason>()
        media.mediaStream.setStreamEndedCallback { reasons.append($0) }
        #expect(await eventually(.seconds(20)) { media.mediaStream.endReason != nil })
        await media.stop()
        guard case .failed? = media.mediaStream.endReason else {
            Issue.record("ended as \(String(describing: media.mediaStream.endReason))")
            return
        }
        #expect(reasons.all.count == 1)
    }

    @Test("the screen source with an empty display name, or with none while DISPLAY is unset, is the typed error deviceNotFound (status notFound)")
    func screenWithoutDisplay() async {
        var displays: [String?] = [""]
        if (ProcessInfo.processInfo.environment["DISPLAY"] ?? "").isEmpty { displays.append(nil) }
        for display in displays {
            var options = UserMediaOptions()
            options.video.source = .screen(display: display)
            options.audio.enabled = false
            do {
                let media = try await UserMedia.getUserMedia(options)
                Issue.record("the screen with display \(String(describing: display)) gave a stream")
                await media.stop()
            } catch {
                #expect(error.code == .deviceNotFound, "\(error)")
                #expect(error.status == .notFound, "\(error)")
            }
        }
    }
}
