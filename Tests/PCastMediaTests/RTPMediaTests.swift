import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import PCastTestSupport
import Synchronization
import Testing

extension OneAtATime {
    /// The publish and receive pipelines joined back to back in-process (no network, no SRTP): what
    /// the relay tests then carry over UDP.
    @Suite("RTP publish and receive pipelines", .serialized)
    struct RTPMediaTests {
        @Test("a stamped frame counter arrives decoded, in order, none missing; RTCP flows both ways")
        func loopback() async throws {
            let media = try await UserMedia.getUserMedia(syntheticOptions(width: 640, height: 360))
            let track = try #require(media.mediaStream.getVideoTracks().first)
            let counter = Atomic<UInt32>(0)
            try media.setFrameReadyCallback(track) { notification in
                guard case .video(var frame)? = try? notification.read() else { return }
                FrameStamp.paint(counter.add(1, ordering: .relaxed).newValue, into: &frame)
                try? notification.write(.video(frame))
            }
            // The receiver first, so that no packet of the publisher is lost before it exists.
            let publisherBox = Mutex<RTPPublisher?>(nil)
            let rtcpToPublisher = Counter(), rtcpToReceiver = Counter()
            let expected = [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 0)]
            // A fixed delay: the overrides below are checked against it (an adaptive one moves;
            // RealPathTests checks overrides over it).
            let (receiver, remote) = try await RTPReceiver.start(tracks: expected, playoutDelay: .fixed(RTPReceiver.defaultPlayoutDelay)) { rtcp in
                rtcpToPublisher.increment()
                publisherBox.withLock { $0 }?.receiveRTCP(rtcp)
            }
            let publisher = try await RTPPublisher.start(stream: media.mediaStream) { packet in
                switch packet.kind {
                case .rtp:
                    let pt = (try? packet.buffer.withUnsafeBytes { $0[1] & 0x7F }) ?? 0
                    receiver.receiveRTP(packet.buffer, payloadType: pt)
                case .rtcp:
                    rtcpToReceiver.increment()
                    receiver.receiveRTCP(packet.buffer)
                }
            }
            publisherBox.withLock { $0 = publisher }
            #expect(publisher.tracks.map(\.kind) == [.video])
            let encoder = try #require(media.engine.pipeline.elements.first { $0.factoryName == "x264enc" })
            let encoded = Recorder<UInt32>()
            let layout = Mutex<VideoInfo?>(nil)
            let encoderPad = try encoder.staticPad("sink")
            layout.withLock { $0 = encoderPad.currentCaps?.videoInfo }
            _ = encoderPad.addCapsProbe { caps in layout.withLock { $0 = caps.videoInfo } }
            let encoderBuffers = Counter()
            _ = encoderPad.addBufferProbe { buffer in
                encoderBuffers.increment()
                if layout.withLock({ $0 }) == nil { layout.withLock { $0 = encoderPad.currentCaps?.videoInfo } }
                if let info = layout.withLock({ $0 }), let value = FrameStamp.read(buffer, info: info) { encoded.append(value) }
                return .pass
            }
            let decoded = Recorder<UInt32>()
            let decodedLayout = Mutex<VideoInfo?>(nil)
            let decoderPad = try receiver.pipeline.element(named: "video-hook").staticPad("src")
            decodedLayout.withLock { $0 = decoderPad.currentCaps?.videoInfo }
            _ = decoderPad.addCapsProbe { caps in decodedLayout.withLock { $0 = caps.videoInfo } }
            _ = decoderPad.addBufferProbe { buffer in
                if decodedLayout.withLock({ $0 }) == nil { decodedLayout.withLock { $0 = decoderPad.currentCaps?.videoInfo } }
                if let info = decodedLayout.withLock({ $0 }), let value = FrameStamp.read(buffer, info: info) { decoded.append(value) }
                return .pass
            }
            let renderer = remote.createRenderer(RendererOptions(useNullVideoDevice: true))
            let seen = Recorder<UInt32>()
            #expect(await renderer.start() == .ok)
            try renderer.setFrameReadyCallback(remote.getVideoTracks()[0]) { notification in
                guard case .video(let frame)? = try? notification.read(), let value = FrameStamp.read(frame) else { return }
                seen.append(value)
            }
            #expect(await eventually(.seconds(20)) { seen.all.count >= 60 })
            // In order; none missing of what was encoded (the encoder's leaky input queue may drop
            // frames on a starved machine, before anything is sent), read at the decoder's output.
            #expect(await eventually(.seconds(20)) { decoded.all.count >= 60 })
            // From the fifth decoded frame: the first ones may meet a jitter buffer whose latency the
            // pipeline has not configured yet.
            let values = Array(decoded.all.dropFirst(4))
            #expect(zip(seen.all, seen.all.dropFirst()).allSatisfy { $0 < $1 }, "the renderer showed frames out of order")
            if let first = values.first, let last = values.last {
                let expected = encoded.all.filter { $0 >= first && $0 <= last }
                #expect(values == expected, "decoded \(values.prefix(80)) of encoded \(expected.prefix(80)); encoder saw \(encoderBuffers.value) buffers, layout \(String(describing: layout.withLock { $0 }))")
            }
            #expect(rtcpToReceiver.value > 0 && rtcpToPublisher.value > 0)
            // Nothing lost, nothing dropped: every frame received was decoded (bar the one in flight).
            let inbound = try #require(receiver.rtcStats().first { $0.kind == "video" })
            #expect((inbound.framesReceived ?? 0) >= 60 && inbound.framesDropped == 0, "\(inbound)")
            // Frames in order leave the jitter buffer as they arrive: a few ms on average, never the
            // whole playout delay.
            let emitted = inbound.jitterBufferEmittedCount ?? 0
            #expect(emitted >= 60, "\(inbound)")
            #expect((inbound.jitterBufferDelay ?? 1) / Double(max(emitted, 1)) < 0.03, "\(inbound)")
            // Overriding the playout delay changes the jitter buffer, the sinks' wait and the
            // renderer's queue; by the seed's rule the latest wins, releasing a superseded override
            // does nothing, and releasing the latest restores the default.
            #expect(renderer.playoutDelay == RTPReceiver.defaultPlayoutDelay)
            let first = renderer.overridePlayoutDelay(0.2)
            #expect(renderer.playoutDelay == .milliseconds(200))
            #expect(try receiver.pipeline.element(named: "rtpbin").property("latency", as: UInt32.self) == 200)
            #expect(receiver.sinkLatency.latency == .milliseconds(200))
            let queue = try #require(receiver.pipeline.elements.first { $0.name.hasSuffix("-video-queue") })
            #expect(try queue.property("max-size-time", as: UInt64.self) == 300_000_000)
            let second = renderer.overridePlayoutDelay(0.1)
            #expect(renderer.playoutDelay == .milliseconds(100))
            first.dispose()
            #expect(renderer.playoutDelay == .milliseconds(100), "a superseded override's release changes nothing")
            #expect(receiver.sinkLatency.latency == .milliseconds(100))
            second.dispose()
            #expect(renderer.playoutDelay == RTPReceiver.defaultPlayoutDelay)
            #expect(receiver.sinkLatency.latency == RTPReceiver.defaultPlayoutDelay)
            #expect(try receiver.pipeline.element(named: "rtpbin").property("latency", as: UInt32.self) == 40)
            #expect(try queue.property("max-size-time", as: UInt64.self) == 140_000_000)
            await publisher.stop()
            await remote.stop()
            await media.stop()
        }

        @Test("framesDropped: with 5 % of the packets lost before the jitter buffer and nothing to repair them, frames wait for a keyframe and are counted dropped; received = decoded + dropped (± the frame in flight)")
        func framesDropped() async throws {
            let media = try await UserMedia.getUserMedia(syntheticOptions(width: 640, height: 360))
            let publisherBox = Mutex<RTPPublisher?>(nil)
            let expected = [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 0)]
            let (receiver, remote) = try await RTPReceiver.start(tracks: expected, impairment: NetworkImpairment(dropProbability: 0.05)) { rtcp in
                publisherBox.withLock { $0 }?.receiveRTCP(rtcp)
            }
            let publisher = try await RTPPublisher.start(stream: media.mediaStream) { packet in
                switch packet.kind {
                case .rtp: receiver.receiveRTP(packet.buffer, payloadType: 96)
                case .rtcp: receiver.receiveRTCP(packet.buffer)
                }
            }
            publisherBox.withLock { $0 = publisher }
            @Sendable func video() -> RTCStats? { receiver.rtcStats().first { $0.kind == "video" } }
            #expect(await eventually(.seconds(30)) { (video()?.framesReceived ?? 0) >= 150 }, "\(String(describing: video()))")
            let stats = try #require(video())
            print("framesDropped at 5 % loss: \(stats)")
            let (received, decoded, dropped) = (stats.framesReceived ?? 0, stats.framesDecoded ?? 0, stats.framesDropped ?? -1)
            #expect(dropped > 0 && dropped < received, "\(stats)")
            #expect(decoded > 0 && (0...2).contains(received - decoded - dropped), "\(stats)")
            // Behind a gap the jitter buffer holds what follows until it gives the missing packet up
            // (the 40 ms playout delay): some frames wait, none much longer.
            let average = (stats.jitterBufferDelay ?? -1) / Double(max(stats.jitterBufferEmittedCount ?? 0, 1))
            #expect((stats.jitterBufferEmittedCount ?? 0) >= 140 && average > 0 && average < 0.1, "average \(average) s: \(stats)")
            await publisher.stop()
            await remote.stop()
            await media.stop()
        }

        @Test("frame stamps read back what was painted and reject unstamped frames")
        func stamps() throws {
            var frame = try VideoFrame(format: .i420, width: 320, height: 240)
            #expect(FrameStamp.read(frame) == nil)
            for value: UInt32 in [0, 1, 0xABCDEF, 0xFFFFFF] {
                FrameStamp.paint(value, into: &frame)
                #expect(FrameStamp.read(frame) == value)
            }
        }

        @Test("a PLI from the network makes the encoder send a keyframe at once")
        func pliForcesKeyframe() async throws {
            let media = try await UserMedia.getUserMedia(syntheticOptions(width: 320, height: 240))
            let publisher = try await RTPPublisher.start(stream: media.mediaStream, settings: EncodingSettings(keyframeInterval: 1000)) { _ in }
            let encoder = try #require(media.engine.pipeline.elements.first { $0.name.hasSuffix("-encoder") && $0.factoryName == "x264enc" })
            let keyframes = Counter(), outputs = Counter()
            _ = try encoder.staticPad("src").addBufferProbe { buffer in
                outputs.increment()
                if buffer.isKeyframe { keyframes.increment() }
                return .pass
            }
            // Once the encoder runs (its first keyframe may precede the probe), a PLI must bring a
            // keyframe long before the 1000-frame interval.
            #expect(await eventually(.seconds(20)) { outputs.value >= 3 }, "the encoder produced nothing")
            let before = keyframes.value
            let ssrc = try #require(publisher.tracks.first?.ssrc)
            let compound = try RTCPCompoundPacket(packets: [
                .receiverReport(RTCPReceiverReport(ssrc: 0x1234_5678)),
                .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: 0x1234_5678, mediaSSRC: ssrc)),
            ]).serialized()
            publisher.receiveRTCP(Buffer(bytes: compound))
            #expect(await eventually(.seconds(5)) { keyframes.value > before }, "no keyframe after a PLI (before: \(before))")
            await publisher.stop()
            await media.stop()
        }
    }
}
