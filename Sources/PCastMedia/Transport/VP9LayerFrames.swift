import GStreamer
import PCastProtocol
import Synchronization

/// Gives a scalable VP9 picture out of GStreamer's depayloader the superframe index it lacks
/// (``VP9Superframe``): the depayloader joins a picture's spatial-layer frames into one buffer
/// without one, which the recording's MP4 (and ffmpeg reading it) takes for one frame of the
/// smallest layer. The layer frames' sizes are read from the RTP packets going in (each frame's
/// payload bytes from its first packet, B, to its last, E); a buffer coming out whose size is
/// their sum gets the index. Both probes run on the depayloader's streaming thread, one packet
/// at a time.
///
/// ```swift
/// probes += VP9LayerFrames.attach(to: try pipeline.element(named: "video-depay"))
/// ```
enum VP9LayerFrames {
    /// The sizes of the layer frames since the depayloader's last picture began.
    private final class Sizes: Sendable {
        let state = Mutex<(done: [Int], current: Int?)>(([], nil))
    }

    static func attach(to depayloader: Element) throws(GStreamerError) -> [PadProbe] {
        let sizes = Sizes()
        let sink = try depayloader.staticPad("sink")
        let source = try depayloader.staticPad("src")
        return [
            sink.addBufferProbe { buffer in
                // Read in place: every packet of the recording passes here.
                let read = try? buffer.withUnsafeBytes { bytes -> (descriptor: VP9Descriptor, length: Int)? in
                    guard let layout = try? RTPPacketLayout(parsing: bytes) else { return nil }
                    let payload = UnsafeRawBufferPointer(rebasing: bytes[layout.payloadRange])
                    guard let descriptor = try? VP9Descriptor(parsing: payload) else { return nil }
                    return (descriptor, payload.count - descriptor.length)
                }
                guard let (descriptor, length) = read ?? nil else { return .pass }
                sizes.state.withLock { state in
                    // Where the depayloader starts a picture (a first packet without inter-layer
                    // dependency), it drops what it had.
                    if descriptor.startsFrame, !(descriptor.layers?.interLayerDependency ?? false) { state = ([], nil) }
                    if descriptor.startsFrame { state.current = 0 }
                    guard let current = state.current else { return }
                    state.current = current + length
                    if descriptor.endsFrame {
                        state.done.append(current + length)
                        state.current = nil
                    }
                }
                return .pass
            },
            source.addBufferProbe { buffer in
                let frames = sizes.state.withLock { state in
                    defer { state = ([], nil) }
                    return state.done
                }
                guard frames.count > 1, frames.reduce(0, +) == buffer.size, let index = VP9Superframe.index(frameSizes: frames),
                      let bytes = try? buffer.withUnsafeBytes({ [UInt8]($0) }) else { return .pass }
                let joined = Buffer(bytes: bytes + index)
                joined.presentationTimestamp = buffer.presentationTimestamp
                joined.decodingTimestamp = buffer.decodingTimestamp
                joined.duration = buffer.duration
                joined.flags = buffer.flags
                buffer = joined
                return .pass
            },
        ]
    }
}
