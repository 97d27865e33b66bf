import GStreamer

/// A number painted into a video frame's luma as 32 blocks (24 bits of value, 8 of checksum), big
/// enough to survive H.264 at any sane bitrate: a frame counter that a subscriber reads back to
/// check order and completeness, or to match frames for glass-to-glass latency.
///
/// ```swift
/// try media.setFrameReadyCallback(track) { n in
///     guard case .video(var frame)? = try? n.read() else { return }
///     FrameStamp.paint(counter.next(), into: &frame)
///     try? n.write(.video(frame))
/// }
/// ```
public enum FrameStamp {
    /// Block edge in pixels; the stamp is 8 × 4 blocks at the top-left corner.
    public static let block = 16
    static let columns = 8, rows = 4

    static func word(_ value: UInt32) -> UInt32 {
        let v = value & 0xFF_FFFF
        let check = (v & 0xFF) &+ ((v >> 8) & 0xFF) &+ ((v >> 16) & 0xFF) &+ 0x5A
        return v << 8 | (check & 0xFF)
    }

    /// Paints `value` (its low 24 bits) into an I420 or NV12 frame of at least 128 × 64 pixels.
    public static func paint(_ value: UInt32, into frame: inout VideoFrame) {
        guard frame.format == .i420 || frame.format == .nv12, frame.width >= columns * block, frame.height >= rows * block else { return }
        let bits = word(value)
        let stride = frame.strides[0], offset = frame.planeOffsets[0]
        try? frame.withUnsafeMutableBytes { bytes in
            for bit in 0..<32 {
                let on = (bits >> (31 - UInt32(bit))) & 1 == 1
                let x0 = (bit % columns) * block, y0 = (bit / columns) * block
                for y in y0..<(y0 + block) {
                    let row = offset + y * stride + x0
                    for x in 0..<block { bytes[row + x] = on ? 235 : 16 }
                }
            }
        }
    }

    /// Reads a painted value back; nil when the checksum does not match (no stamp, or damaged).
    /// `scale` is the frame's width over the painted frame's (a smaller simulcast layer of it).
    public static func read(_ frame: VideoFrame, scale: Double = 1) -> UInt32? {
        let block = max(4, Int((Double(Self.block) * scale).rounded()))
        guard frame.format == .i420 || frame.format == .nv12, frame.width >= columns * block, frame.height >= rows * block else { return nil }
        let inset = block / 4, side = block / 2
        let stride = frame.strides[0], offset = frame.planeOffsets[0]
        let bits: UInt32? = try? frame.withUnsafeBytes { bytes in
            var bits: UInt32 = 0
            for bit in 0..<32 {
                let x0 = (bit % columns) * block, y0 = (bit / columns) * block
                // The centre half of each block, away from edges compression smears.
                var sum = 0
                for y in (y0 + inset)..<(y0 + inset + side) {
                    let row = offset + y * stride + x0 + inset
                    for x in 0..<side { sum += Int(bytes[row + x]) }
                }
                bits = bits << 1 | (sum / (side * side) > 125 ? 1 : 0)
            }
            return bits
        }
        guard let bits else { return nil }
        let value = bits >> 8
        return word(value) == bits ? value : nil
    }

    /// Reads a stamp from a raw I420/NV12 buffer of the given layout (in a pad probe).
    public static func read(_ buffer: Buffer, info: VideoInfo, scale: Double = 1) -> UInt32? {
        guard info.format == .i420 || info.format == .nv12 else { return nil }
        let frame = VideoFrame(storage: buffer, format: info.format, width: info.width, height: info.height,
                               strides: info.strides, planeOffsets: info.offsets, presentationTimestamp: nil, duration: nil)
        return read(frame, scale: scale)
    }
}
