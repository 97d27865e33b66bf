import CGStreamer

/// How a seek behaves (`GstSeekFlags`).
public struct SeekFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Throw away queued data and restart from the new position.
    public static let flush = SeekFlags(rawValue: GST_SEEK_FLAG_FLUSH.rawValue)
    /// Land on a keyframe.
    public static let keyUnit = SeekFlags(rawValue: GST_SEEK_FLAG_KEY_UNIT.rawValue)
    /// With ``keyUnit``: the keyframe at or after the position.
    public static let snapAfter = SeekFlags(rawValue: GST_SEEK_FLAG_SNAP_AFTER.rawValue)
    /// With ``keyUnit``: the keyframe at or before the position.
    public static let snapBefore = SeekFlags(rawValue: GST_SEEK_FLAG_SNAP_BEFORE.rawValue)
    /// Post `segment-done` at the end instead of end-of-stream, so a new (non-flushing) seek can
    /// continue seamlessly: how looping is done.
    public static let segment = SeekFlags(rawValue: GST_SEEK_FLAG_SEGMENT.rawValue)
}

extension Element {
    /// Seeks to `position` (media time): the whole pipeline, or one source element's streams
    /// (a `uridecodebin` looping on its own). False when it cannot seek there (live sources, or
    /// not yet prerolled).
    ///
    /// ```swift
    /// _ = pipeline.seek(to: .milliseconds(500), flags: [.flush, .keyUnit, .snapAfter])
    /// ```
    @discardableResult
    public func seek(to position: Duration, flags: SeekFlags = [.flush, .keyUnit]) -> Bool {
        let (seconds, attoseconds) = position.components
        let nanoseconds = max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        return gst_element_seek_simple(pointer, GST_FORMAT_TIME, GstSeekFlags(rawValue: flags.rawValue), gint64(nanoseconds)) != 0
    }
}
