import CGStreamer

extension Pipeline {
    /// Makes running time zero of this pipeline the clock time `baseTime` (another pipeline's
    /// ``baseTime`` on the same clock), so both pipelines' running times name the same instants.
    /// Call before playing; the pipeline keeps this base time across pauses.
    ///
    /// ```swift
    /// let reference = try Pipeline(description: "…")
    /// reference.useSystemClock()
    /// reference.setBaseTime(capture.baseTime!)   // capture runs on the system clock too
    /// try await reference.play()
    /// ```
    public func setBaseTime(_ baseTime: Duration) {
        // A start time of NONE stops GStreamer from choosing a new base time when it plays.
        gst_element_set_start_time(pointer, GstClockTime.max)
        gst_element_set_base_time(pointer, baseTime.clockTime)
    }

    /// The system clock's current time: the clock of pipelines that ``useSystemClock()``, readable
    /// before they play (to note when something happened, for a timestamp given later).
    public static var systemClockTime: Duration {
        guard let clock = gst_system_clock_obtain() else { return .zero }
        defer { gst_object_unref(UnsafeMutableRawPointer(clock)) }
        return Duration(clockTime: gst_clock_get_time(clock)) ?? .zero
    }

    /// The pipeline clock's current time (nil without a clock, before playing).
    public var clockTime: Duration? {
        guard let clock = gst_element_get_clock(pointer) else { return nil }
        defer { gst_object_unref(UnsafeMutableRawPointer(clock)) }
        return Duration(clockTime: gst_clock_get_time(clock))
    }
}

extension Pad {
    /// The running time of a buffer timestamp on this pad: the timestamp through the pad's current
    /// time segment, plus the pad's ``offset``. Nil before a time segment has passed, or for a
    /// timestamp outside the segment.
    ///
    /// ```swift
    /// pad.addBufferProbe { buffer in
    ///     let runningTime = buffer.presentationTimestamp.flatMap { pad.runningTime(of: $0) }
    ///     return .pass
    /// }
    /// ```
    public func runningTime(of timestamp: Duration) -> Duration? {
        guard let event = gst_pad_get_sticky_event(pointer, GST_EVENT_SEGMENT, 0) else { return nil }
        defer { gst_mini_object_unref(UnsafeMutableRawPointer(event).assumingMemoryBound(to: GstMiniObject.self)) }
        var segment: UnsafePointer<GstSegment>?
        gst_event_parse_segment(event, &segment)
        guard let segment, segment.pointee.format == GST_FORMAT_TIME else { return nil }
        let running = gst_segment_to_running_time(segment, GST_FORMAT_TIME, timestamp.clockTime)
        guard let value = Duration(clockTime: running) else { return nil }
        return value + offset
    }
}
