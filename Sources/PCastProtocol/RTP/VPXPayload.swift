/// What an RFC 7741 VP8 RTP payload starts, read from its payload descriptor and the first bytes
/// of the frame.
///
/// ```swift
/// if VP8Payload.startsKeyframe(payload) { resumeHere() }
/// ```
public enum VP8Payload {
    /// The length of the payload descriptor (1 to 6 bytes), or nil when the payload is too short
    /// to hold the descriptor its flags announce.
    public static func descriptorLength(_ payload: UnsafeRawBufferPointer) -> Int? {
        guard let first = payload.first else { return nil }
        var length = 1
        guard first & 0x80 != 0 else { return length }  // X: no extension byte
        guard payload.count > length else { return nil }
        let extensions = payload[length]
        length += 1
        if extensions & 0x80 != 0 {  // I: a picture ID, 7 or 15 bits (M)
            guard payload.count > length else { return nil }
            length += payload[length] & 0x80 != 0 ? 2 : 1
        }
        if extensions & 0x40 != 0 { length += 1 }  // L: TL0PICIDX
        if extensions & 0x30 != 0 { length += 1 }  // T or K: TID/Y/KEYIDX
        return payload.count >= length ? length : nil
    }

    /// True when the payload is the first packet of a key frame: the start of partition 0 (S set,
    /// PID 0) whose frame tag says key frame (its P bit, the first bit of the frame, is 0).
    public static func startsKeyframe(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard let first = payload.first, first & 0x10 != 0, first & 0x07 == 0,
              let length = descriptorLength(payload), payload.count > length
        else { return false }
        return payload[length] & 0x01 == 0
    }

    /// `startsKeyframe` of the payload of a whole RTP packet; false if the packet does not parse.
    public static func packetStartsKeyframe(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsKeyframe(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }
}

/// What a VP9 RTP payload (RFC 9628) starts, read from its payload descriptor.
///
/// ```swift
/// if VP9Payload.startsKeyframe(payload) { resumeHere() }
/// ```
public enum VP9Payload {
    /// True when the payload is the first packet of a key frame of the base spatial layer: the
    /// start of a frame (B) that is not inter-picture predicted (P clear), with a spatial layer
    /// index of 0 when the descriptor carries layer indices (L).
    public static func startsKeyframe(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard let first = payload.first, first & 0x08 != 0, first & 0x40 == 0 else { return false }
        guard first & 0x20 != 0 else { return true }  // L: no layer indices
        var offset = 1
        if first & 0x80 != 0 {  // I: a picture ID, 7 or 15 bits (M)
            guard payload.count > offset else { return false }
            offset += payload[offset] & 0x80 != 0 ? 2 : 1
        }
        guard payload.count > offset else { return false }
        return (payload[offset] >> 1) & 0x07 == 0  // TID(3) U(1) SID(3) D(1)
    }

    /// `startsKeyframe` of the payload of a whole RTP packet; false if the packet does not parse.
    public static func packetStartsKeyframe(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsKeyframe(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }
}
