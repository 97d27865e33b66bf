import Testing
import GStreamer
@testable import PCastMedia
import Synchronization

/// The frame stamps passing a pad, in order (read in a probe, so nothing is dropped on the way to
/// the test the way a renderer's leaky queue may under load).
final class StampTap: Sendable {
    private let values = Values<UInt32>()
    private let probes: [PadProbe]
    /// Frame widths seen, in order of change (a simulcast viewer's layers), and frames whose stamp
    /// did not read (damaged, or from no stamped source).
    let widths = Values<Int>()
    /// Each read stamp's frame width, in step with `all`.
    let frameWidths = Values<Int>()
    let unreadable = Counter()
    /// Where the first unreadable frames came: after which stamp, at which width ("1234@1280").
    let unreadableAt = Values<String>()

    final class Counter: Sendable {
        private let value = Atomic<Int>(0)
        func add() { value.add(1, ordering: .relaxed) }
        var count: Int { value.load(ordering: .relaxed) }
    }

    /// `paintedWidth`: the width the stamps were painted at, when frames may arrive smaller
    /// (simulcast layers); nil reads every frame at the painted scale.
    init(_ pad: Pad, paintedWidth: Int? = nil) {
        let values = self.values, widths = self.widths, unreadable = self.unreadable, frameWidths = self.frameWidths
        let unreadableAt = self.unreadableAt
        let info = LayoutBox()
        info.value.withLock { $0 = pad.currentCaps?.videoInfo }   // caps negotiated before the tap
        let caps = pad.addCapsProbe { caps in info.value.withLock { $0 = caps.videoInfo } }
        let buffers = pad.addBufferProbe { buffer in
            // Caps may have been set between reading them and installing the caps probe.
            if info.value.withLock({ $0 }) == nil { info.value.withLock { $0 = pad.currentCaps?.videoInfo } }
            guard let layout = info.value.withLock({ $0 }) else { return .pass }
            if widths.all.last != layout.width { widths.append(layout.width) }
            let scale = paintedWidth.map { Double(layout.width) / Double($0) } ?? 1
            if let value = FrameStamp.read(buffer, info: layout, scale: scale) {
                values.append(value)
                frameWidths.append(layout.width)
            } else {
                if unreadable.count < 4 { unreadableAt.append("\(values.all.last.map(String.init) ?? "-")@\(layout.width)") }
                unreadable.add()
            }
            return .pass
        }
        probes = [caps, buffers]
    }

    /// At the encoder's input of a user-media stream (what was actually encoded and sent).
    convenience init(encoderOf media: UserMediaStream) throws {
        let encoder = try #require(media.engine.pipeline.elements.first { ["x264enc", "vp8enc", "vp9enc", "av1enc", "x265enc"].contains($0.factoryName) })
        self.init(try encoder.staticPad("sink"))
    }

    /// Where a user-media stream's frames leave for the encoders, after the frame-ready hook that
    /// paints them (what every simulcast layer was encoded from).
    convenience init(captureOf media: UserMediaStream) throws {
        self.init(try media.engine.pipeline.element(named: "video-tee").staticPad("sink"))
    }

    /// At the decoder's output of a subscribed stream.
    convenience init(decoderOf stream: MediaStream, paintedWidth: Int? = nil) throws {
        self.init(try stream.engine.pipeline.element(named: "video-hook").staticPad("src"), paintedWidth: paintedWidth)
    }

    var all: [UInt32] { values.all }

    deinit { probes.forEach { $0.remove() } }
}

/// Whether `received` is in order and has every value `sent` has between its first and last.
func complete(_ received: [UInt32], sent: [UInt32]) -> Bool {
    complete(received, sent: sent, unreadable: 0)
}

/// Whether `received` is `sent` in order, from its first to its last, with at most `unreadable`
/// stamps missing: frames that were decoded and shown but whose stamp a coarse moment of the
/// encoder left unreadable (counted by the tap), never more.
func complete(_ received: [UInt32], sent: [UInt32], unreadable: Int) -> Bool {
    guard let first = received.first, let last = received.last else { return false }
    let expected = sent.filter { $0 >= first && $0 <= last }
    guard received.count + unreadable >= expected.count, received.count <= expected.count else { return false }
    var index = expected.startIndex
    for stamp in received {
        guard let found = expected[index...].firstIndex(of: stamp) else { return false }
        index = found + 1
    }
    return true
}

final class LayoutBox: Sendable {
    let value = Mutex<VideoInfo?>(nil)
}
