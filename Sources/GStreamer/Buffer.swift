import CGStreamer
import CGStreamerShim
import Synchronization

/// Flags on a buffer (`GstBufferFlags`).
public struct BufferFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let live = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_LIVE.rawValue))
    public static let decodeOnly = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_DECODE_ONLY.rawValue))
    public static let discontinuity = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_DISCONT.rawValue))
    public static let resync = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_RESYNC.rawValue))
    public static let corrupted = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_CORRUPTED.rawValue))
    /// RTP marker bit / end of a video frame.
    public static let marker = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_MARKER.rawValue))
    public static let header = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_HEADER.rawValue))
    public static let gap = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_GAP.rawValue))
    public static let droppable = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_DROPPABLE.rawValue))
    /// Set on everything but keyframes.
    public static let deltaUnit = BufferFlags(rawValue: UInt32(GST_BUFFER_FLAG_DELTA_UNIT.rawValue))
}

/// A block of media data with timestamps (`GstBuffer`).
///
/// Mutation is copy-on-write: writing to a buffer that GStreamer also holds elsewhere first makes
/// it private, so no other holder ever sees the change.
///
/// ```swift
/// let buffer = Buffer(bytes: [1, 2, 3])
/// buffer.presentationTimestamp = .milliseconds(40)
/// try buffer.withUnsafeMutableBytes { $0[0] = 9 }
/// let sum = try buffer.withUnsafeBytes { $0.reduce(0, { $0 + Int($1) }) }
/// ```
/// Unchecked: the GstBuffer pointer lives in the `Mutex` `handle`; writes make a private copy first.
public final class Buffer: @unchecked Sendable {
    /// The buffer pointer; replaced when a write has to make a private copy.
    /// Unchecked: a GstBuffer pointer, reached only inside the buffer's `Mutex`.
    private struct Handle: @unchecked Sendable {
        var pointer: UnsafeMutablePointer<GstBuffer>
    }
    private let handle: Mutex<Handle>

    init(owning pointer: UnsafeMutablePointer<GstBuffer>) {
        handle = Mutex(Handle(pointer: pointer))
    }

    package init(retaining pointer: UnsafeMutablePointer<GstBuffer>) {
        _ = gst_mini_object_ref(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstMiniObject.self))
        handle = Mutex(Handle(pointer: pointer))
    }

    /// A buffer of `size` bytes (contents undefined until written).
    public convenience init(size: Int) {
        try? GStreamerRuntime.initialize()
        self.init(owning: gst_buffer_new_allocate(nil, gsize(max(size, 0)), nil))
    }

    /// A buffer holding a copy of `bytes`.
    public convenience init(bytes: some Collection<UInt8>) {
        self.init(size: bytes.count)
        // A new buffer is writable and mappable.
        try! withUnsafeMutableBytes { raw in _ = raw.initializeMemory(as: UInt8.self, from: bytes) }
    }

    deinit {
        gst_mini_object_unref(UnsafeMutableRawPointer(handle.withLock { $0.pointer }).assumingMemoryBound(to: GstMiniObject.self))
    }

    /// A new reference for handing to GStreamer (transfer full).
    package func retainedPointer() -> UnsafeMutablePointer<GstBuffer> {
        handle.withLock { handle in
            _ = gst_mini_object_ref(UnsafeMutableRawPointer(handle.pointer).assumingMemoryBound(to: GstMiniObject.self))
            return handle.pointer
        }
    }

    /// Makes the underlying buffer private to this wrapper when others share it, then runs `body`.
    func withWritablePointer<R>(_ body: (UnsafeMutablePointer<GstBuffer>) throws -> R) rethrows -> R {
        try handle.withLock { handle in
            if pcast_gst_buffer_is_writable(handle.pointer) == 0 {
                handle.pointer = pcast_gst_buffer_make_writable(handle.pointer)
            }
            return try body(handle.pointer)
        }
    }

    private func read<R>(_ body: (UnsafeMutablePointer<GstBuffer>) -> R) -> R {
        handle.withLock { body($0.pointer) }
    }

    /// Size of the data in bytes.
    public var size: Int { read { Int(gst_buffer_get_size($0)) } }

    /// Presentation timestamp (`nil` when unset).
    public var presentationTimestamp: Duration? {
        get { read { Duration(clockTime: $0.pointee.pts) } }
        set { withWritablePointer { $0.pointee.pts = newValue.clockTime } }
    }

    /// Decoding timestamp (`nil` when unset).
    public var decodingTimestamp: Duration? {
        get { read { Duration(clockTime: $0.pointee.dts) } }
        set { withWritablePointer { $0.pointee.dts = newValue.clockTime } }
    }

    /// Duration (`nil` when unset).
    public var duration: Duration? {
        get { read { Duration(clockTime: $0.pointee.duration) } }
        set { withWritablePointer { $0.pointee.duration = newValue.clockTime } }
    }

    /// Media-specific counter: frame number for video from some sources, sample offset for audio.
    public var offset: UInt64? {
        get { read { $0.pointee.offset == guint64.max ? nil : UInt64($0.pointee.offset) } }
        set { withWritablePointer { $0.pointee.offset = newValue.map { guint64($0) } ?? guint64.max } }
    }

    public var flags: BufferFlags {
        get { read { BufferFlags(rawValue: $0.pointee.mini_object.flags) } }
        set { withWritablePointer { $0.pointee.mini_object.flags = newValue.rawValue } }
    }

    /// Whether this buffer can be decoded on its own (not a delta unit).
    public var isKeyframe: Bool { !flags.contains(.deltaUnit) }

    /// Reads the data in place. The pointer is valid only inside `body`.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        try read { pointer -> Result<R, any Error> in
            var map = GstMapInfo()
            guard gst_buffer_map(pointer, &map, GST_MAP_READ) != 0 else { return .failure(GStreamerError.mapFailed) }
            defer { gst_buffer_unmap(pointer, &map) }
            return Result { try body(UnsafeRawBufferPointer(start: map.data, count: Int(map.size))) }
        }.get()
    }

    /// Writes the data in place (copying it first if it is shared). The pointer is valid only inside `body`.
    public func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) throws -> R {
        try withWritablePointer { pointer -> Result<R, any Error> in
            var map = GstMapInfo()
            // Mapping for write also copies memory blocks that other buffers share.
            guard gst_buffer_map(pointer, &map, GST_MAP_WRITE) != 0 else { return .failure(GStreamerError.mapFailed) }
            defer { gst_buffer_unmap(pointer, &map) }
            return Result { try body(UnsafeMutableRawBufferPointer(start: map.data, count: Int(map.size))) }
        }.get()
    }

    /// A copy of the data.
    public var bytes: [UInt8] {
        (try? withUnsafeBytes { Array($0.bindMemory(to: UInt8.self)) }) ?? []
    }

    /// A new buffer sharing this one's memory (no bytes copied), with timestamps and flags of its
    /// own; writing to either gives that one private memory first.
    public func shallowCopy() -> Buffer {
        read { Buffer(owning: gst_buffer_copy($0)) }
    }

    /// A deep copy: new memory, same timestamps and flags.
    public func copy() -> Buffer {
        read { Buffer(owning: gst_buffer_copy_deep($0)) }
    }
}

extension Duration {
    /// Converts a GstClockTime (nanoseconds; all ones means "none").
    init?(clockTime: GstClockTime) {
        guard clockTime != GstClockTime.max else { return nil }
        self = .nanoseconds(Int64(clamping: clockTime))
    }

    /// Whole nanoseconds, saturating.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (ns, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return ns.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }

    var clockTime: GstClockTime { GstClockTime(clamping: max(nanoseconds, 0)) }
}

extension Optional where Wrapped == Duration {
    var clockTime: GstClockTime { self?.clockTime ?? GstClockTime.max }
}
