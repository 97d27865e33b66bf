import GStreamer

/// Whether a stream carries audio or video.
///
/// ```swift
/// if notification.kind == .video { … }
/// ```
public enum MediaKind: String, Sendable, Hashable, CustomStringConvertible {
    case video
    case audio
    public var description: String { rawValue }
}

/// A raw video pixel format, by GStreamer's name: the SDK's name for ``GStreamer/VideoFormat``.
///
/// ``FrameNotification/read(format:)`` converts to any of them; `.i420`, `.nv12` and `.bgra` are
/// the formats the PCast SDK documents (`PhenixMediaFormat`).
///
/// ```swift
/// let frame = try notification.read(format: .bgra)
/// frame.format == .bgra   // true
/// PixelFormat(rawValue: "YUY2") == .yuy2
/// ```
public typealias PixelFormat = VideoFormat

/// One raw video frame: its layout, its timestamps and its bytes.
///
/// A value type: copies share the bytes until one of them writes, which then gets bytes of its own.
/// The bytes are reached in a scope, like `Array.withUnsafeBytes`. Planes lie at ``planeOffsets``
/// from the start of the bytes, each row ``strides`` bytes apart.
///
/// ```swift
/// var frame = try VideoFrame(format: .bgra, width: 640, height: 360, presentationTimestamp: .zero)
/// try frame.withUnsafeMutableBytes { bytes in
///     for pixel in stride(from: 0, to: bytes.count, by: 4) {
///         bytes[pixel + 2] = 255   // red
///         bytes[pixel + 3] = 255   // opaque
///     }
/// }
/// try notification.write(frame)
/// ```
public struct VideoFrame: Sendable {
    public let format: PixelFormat
    public let width: Int
    public let height: Int
    /// Bytes per row, one per plane.
    public let strides: [Int]
    /// Where each plane starts, in bytes from the start of the frame's bytes.
    public let planeOffsets: [Int]
    public var presentationTimestamp: Duration?
    public var duration: Duration?

    /// The bytes; a GStreamer buffer, shared copy-on-write.
    private(set) var storage: Buffer

    public var planeCount: Int { strides.count }
    /// Size of the frame's bytes.
    public var byteCount: Int { storage.size }
    /// The frame's GStreamer buffer (shared), for elements of ours that hand frames on.
    package var buffer: Buffer { storage }

    /// A frame of the default layout for its format and size, every byte zero.
    ///
    /// - Throws: ``MediaError/invalidFrame(_:)`` for an unknown format or an empty size.
    public init(format: PixelFormat, width: Int, height: Int,
                presentationTimestamp: Duration? = nil, duration: Duration? = nil) throws(MediaError) {
        let info = try Self.layout(format: format, width: width, height: height)
        let buffer = Buffer(size: info.size)
        // A new buffer is writable and mappable.
        _ = try? buffer.withUnsafeMutableBytes { $0.initializeMemory(as: UInt8.self, repeating: 0) }
        self.init(storage: buffer, format: format, width: width, height: height, strides: info.strides,
                  planeOffsets: info.offsets, presentationTimestamp: presentationTimestamp, duration: duration)
    }

    /// A frame of the default layout holding a copy of `bytes`, which must be exactly one frame.
    ///
    /// - Throws: ``MediaError/invalidFrame(_:)`` for an unknown format, an empty size or a byte
    ///   count that is not the layout's.
    public init(format: PixelFormat, width: Int, height: Int, bytes: some Collection<UInt8>,
                presentationTimestamp: Duration? = nil, duration: Duration? = nil) throws(MediaError) {
        let info = try Self.layout(format: format, width: width, height: height)
        guard bytes.count == info.size else {
            throw .invalidFrame("\(format) \(width)×\(height) takes \(info.size) bytes, given \(bytes.count)")
        }
        self.init(storage: Buffer(bytes: bytes), format: format, width: width, height: height, strides: info.strides,
                  planeOffsets: info.offsets, presentationTimestamp: presentationTimestamp, duration: duration)
    }

    init(storage: Buffer, format: PixelFormat, width: Int, height: Int, strides: [Int], planeOffsets: [Int],
         presentationTimestamp: Duration?, duration: Duration?) {
        self.storage = storage
        self.format = format
        self.width = width
        self.height = height
        self.strides = strides
        self.planeOffsets = planeOffsets
        self.presentationTimestamp = presentationTimestamp
        self.duration = duration
    }

    static func layout(format: PixelFormat, width: Int, height: Int) throws(MediaError) -> VideoInfo {
        do {
            return try VideoInfo(format: format, width: width, height: height)
        } catch {
            throw .invalidFrame("no \(format) layout for \(width)×\(height)")
        }
    }

    /// Reads the bytes in place; the pointer is valid only inside `body`.
    ///
    /// - Throws: `GStreamerError.mapFailed` when the memory cannot be mapped, or what `body` throws.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        try storage.withUnsafeBytes(body)
    }

    /// Writes the bytes in place, after taking a private copy if they are shared; the pointer is
    /// valid only inside `body`.
    ///
    /// - Throws: `GStreamerError.mapFailed` when the memory cannot be mapped, or what `body` throws.
    public mutating func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) throws -> R {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return try storage.withUnsafeMutableBytes(body)
    }

    /// A copy of the bytes.
    public var bytes: [UInt8] { storage.bytes }
}

/// How audio samples are stored. The frame-ready API hands out signed 16-bit samples in the
/// machine's byte order, channels interleaved, as the PCast SDK does.
///
/// ```swift
/// if let frame = try notification.read().audio, frame.format == .s16 { … }
/// ```
public enum AudioSampleFormat: String, Sendable, Hashable, CustomStringConvertible {
    /// Signed 16-bit, native byte order, interleaved (`S16LE` on little-endian machines).
    case s16
    public var description: String { rawValue }

    /// GStreamer's name for the format on this machine.
    package var gstreamerName: String {
        1.littleEndian == 1 ? "S16LE" : "S16BE"
    }
}

/// One block of raw audio: S16 samples, channels interleaved.
///
/// A value type, copy-on-write like ``VideoFrame``.
///
/// ```swift
/// let silence = try AudioFrame(silenceOf: 480, channels: 2, sampleRate: 48_000,
///                              presentationTimestamp: frame.presentationTimestamp)
/// try notification.write(silence)
///
/// let peak = try frame.withUnsafeSamples { $0.map { abs(Int($0)) }.max() ?? 0 }
/// ```
public struct AudioFrame: Sendable {
    public let format: AudioSampleFormat
    public let channels: Int
    public let sampleRate: Int
    public var presentationTimestamp: Duration?
    /// `nil` when the producer did not say; ``FrameNotification/write(_:)-(AudioFrame)`` then uses
    /// the sample count and rate.
    public var duration: Duration?

    private(set) var storage: Buffer

    /// Samples per channel (what the PCast SDK calls the number of samples).
    public var sampleCount: Int { storage.size / (2 * channels) }
    /// The frame's GStreamer buffer (shared), for elements of ours that hand frames on.
    package var buffer: Buffer { storage }

    /// The length the sample count and rate give.
    public var sampleDuration: Duration {
        .nanoseconds(Int64(sampleCount) * 1_000_000_000 / Int64(sampleRate))
    }

    /// A frame holding a copy of interleaved `samples` (`sampleCount × channels` values).
    ///
    /// - Throws: ``MediaError/invalidFrame(_:)`` when the channel count or rate is not positive, or
    ///   the number of values is not a multiple of the channel count.
    public init(channels: Int, sampleRate: Int, samples: [Int16],
                presentationTimestamp: Duration? = nil, duration: Duration? = nil) throws(MediaError) {
        try Self.validate(channels: channels, sampleRate: sampleRate)
        guard samples.count % channels == 0 else {
            throw .invalidFrame("\(samples.count) samples do not divide into \(channels) channels")
        }
        let buffer = samples.withUnsafeBytes { Buffer(bytes: $0) }
        self.init(storage: buffer, channels: channels, sampleRate: sampleRate,
                  presentationTimestamp: presentationTimestamp, duration: duration)
    }

    /// `sampleCount` samples per channel of silence.
    public init(silenceOf sampleCount: Int, channels: Int, sampleRate: Int,
                presentationTimestamp: Duration? = nil, duration: Duration? = nil) throws(MediaError) {
        try Self.validate(channels: channels, sampleRate: sampleRate)
        guard sampleCount >= 0 else { throw .invalidFrame("negative sample count \(sampleCount)") }
        let buffer = Buffer(size: sampleCount * channels * 2)
        _ = try? buffer.withUnsafeMutableBytes { $0.initializeMemory(as: UInt8.self, repeating: 0) }
        self.init(storage: buffer, channels: channels, sampleRate: sampleRate,
                  presentationTimestamp: presentationTimestamp, duration: duration)
    }

    init(storage: Buffer, channels: Int, sampleRate: Int, presentationTimestamp: Duration?, duration: Duration?) {
        self.format = .s16
        self.storage = storage
        self.channels = channels
        self.sampleRate = sampleRate
        self.presentationTimestamp = presentationTimestamp
        self.duration = duration
    }

    private static func validate(channels: Int, sampleRate: Int) throws(MediaError) {
        guard channels > 0, sampleRate > 0 else {
            throw .invalidFrame("\(channels) channels at \(sampleRate) Hz")
        }
    }

    /// Reads the interleaved samples in place; the pointer is valid only inside `body`.
    ///
    /// - Throws: `GStreamerError.mapFailed` when the memory cannot be mapped, or what `body` throws.
    public func withUnsafeSamples<R>(_ body: (UnsafeBufferPointer<Int16>) throws -> R) throws -> R {
        try storage.withUnsafeBytes { raw in
            let count = raw.count / 2
            guard let base = raw.baseAddress else { return try body(UnsafeBufferPointer(start: nil, count: 0)) }
            if Int(bitPattern: base) % MemoryLayout<Int16>.alignment == 0 {
                return try body(UnsafeBufferPointer(start: base.assumingMemoryBound(to: Int16.self), count: count))
            }
            // Memory GStreamer hands out is aligned; an odd offset is copied rather than misread.
            let aligned = (0..<count).map { raw.loadUnaligned(fromByteOffset: $0 * 2, as: Int16.self) }
            return try aligned.withUnsafeBufferPointer(body)
        }
    }

    /// Writes the interleaved samples in place, after taking a private copy if they are shared.
    ///
    /// - Throws: `GStreamerError.mapFailed` when the memory cannot be mapped, or what `body` throws.
    public mutating func withUnsafeMutableSamples<R>(_ body: (UnsafeMutableBufferPointer<Int16>) throws -> R) throws -> R {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return try storage.withUnsafeMutableBytes { raw in
            let count = raw.count / 2
            guard let base = raw.baseAddress else { return try body(UnsafeMutableBufferPointer(start: nil, count: 0)) }
            if Int(bitPattern: base) % MemoryLayout<Int16>.alignment == 0 {
                return try body(UnsafeMutableBufferPointer(start: base.assumingMemoryBound(to: Int16.self), count: count))
            }
            var aligned = (0..<count).map { raw.loadUnaligned(fromByteOffset: $0 * 2, as: Int16.self) }
            defer { for (index, value) in aligned.enumerated() { raw.storeBytes(of: value, toByteOffset: index * 2, as: Int16.self) } }
            return try aligned.withUnsafeMutableBufferPointer { try body($0) }
        }
    }

    /// A copy of the interleaved samples.
    public var samples: [Int16] {
        (try? withUnsafeSamples { Array($0) }) ?? []
    }
}

/// A frame of either kind, as ``FrameNotification/read()`` returns it.
///
/// ```swift
/// switch try notification.read() {
/// case .video(let frame): print(frame.width, frame.height)
/// case .audio(let frame): print(frame.sampleCount)
/// }
/// ```
public enum MediaFrame: Sendable {
    case video(VideoFrame)
    case audio(AudioFrame)

    public var kind: MediaKind {
        switch self {
        case .video: return .video
        case .audio: return .audio
        }
    }

    /// The video frame, when this is one.
    public var video: VideoFrame? {
        if case .video(let frame) = self { return frame }
        return nil
    }

    /// The audio frame, when this is one.
    public var audio: AudioFrame? {
        if case .audio(let frame) = self { return frame }
        return nil
    }
}
