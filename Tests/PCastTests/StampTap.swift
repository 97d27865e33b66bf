import Testing
import GStreamer
@testable import PCastMedia
import Synchronization

/// The frame stamps passing a pad, in order (read in a probe, so nothing is dropped on the way to
/// the test the way a renderer's leaky queue may under load).
final class StampTap: Sendable {
    private let values = Values<UInt32>()
    private let probes: [PadProbe]

    init(_ pad: Pad) {
        let values = self.values
        let info = LayoutBox()
        info.value.withLock { $0 = pad.currentCaps?.videoInfo }   // caps negotiated before the tap
        let caps = pad.addCapsProbe { caps in info.value.withLock { $0 = caps.videoInfo } }
        let buffers = pad.addBufferProbe { buffer in
            // Caps may have been set between reading them and installing the caps probe.
            if info.value.withLock({ $0 }) == nil { info.value.withLock { $0 = pad.currentCaps?.videoInfo } }
            if let layout = info.value.withLock({ $0 }), let value = FrameStamp.read(buffer, info: layout) {
                values.append(value)
            }
            return .pass
        }
        probes = [caps, buffers]
    }

    /// At the encoder's input of a user-media stream (what was actually encoded and sent).
    convenience init(encoderOf media: UserMediaStream) throws {
        let encoder = try #require(media.engine.pipeline.elements.first { $0.factoryName == "x264enc" })
        self.init(try encoder.staticPad("sink"))
    }

    /// At the decoder's output of a subscribed stream.
    convenience init(decoderOf stream: MediaStream) throws {
        self.init(try stream.engine.pipeline.element(named: "video-hook").staticPad("src"))
    }

    var all: [UInt32] { values.all }

    deinit { probes.forEach { $0.remove() } }
}

/// Whether `received` is in order and has every value `sent` has between its first and last.
func complete(_ received: [UInt32], sent: [UInt32]) -> Bool {
    guard let first = received.first, let last = received.last else { return false }
    let expected = sent.filter { $0 >= first && $0 <= last }
    return received == expected
}

final class LayoutBox: Sendable {
    let value = Mutex<VideoInfo?>(nil)
}
