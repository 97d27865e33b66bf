// MARK: - H.264 Annex-B

/// H.264 byte-stream helpers.
///
/// ```swift
/// let sample = H264.lengthPrefixed(annexB: au)       // 00 00 00 01 67 ... → 00 00 00 0c 67 ...
/// let sets = H264.parameterSets(annexB: au)          // sets.sps, sets.pps
/// ```
public enum H264 {
    /// The first SPS and PPS of an access unit, without start codes.
    ///
    /// ```swift
    /// if let sps = sets.sps, let pps = sets.pps { codec = .h264(width: w, height: h, sps: sps, pps: pps) }
    /// ```
    public struct ParameterSets: Sendable, Equatable {
        public var sps: [UInt8]?
        public var pps: [UInt8]?
    }

    /// The NAL units of an Annex-B access unit (start codes `00 00 01` or `00 00 00 01`),
    /// without start codes or trailing zero bytes. Bytes before the first start code are ignored.
    public static func nalUnits(annexB data: [UInt8]) -> [ArraySlice<UInt8>] {
        var units: [ArraySlice<UInt8>] = []
        var start: Int?
        var i = 0
        while i + 2 < data.count {
            if data[i] == 0, data[i + 1] == 0, data[i + 2] == 1 {
                if let s = start { appendTrimmed(data[s..<i], to: &units) }
                i += 3
                start = i
            } else {
                i += 1
            }
        }
        if let s = start, s < data.count { appendTrimmed(data[s..<data.count], to: &units) }
        return units
    }

    private static func appendTrimmed(_ unit: ArraySlice<UInt8>, to units: inout [ArraySlice<UInt8>]) {
        var end = unit.endIndex
        while end > unit.startIndex, unit[end - 1] == 0 { end -= 1 }
        if end > unit.startIndex { units.append(unit[unit.startIndex..<end]) }
    }

    /// An Annex-B access unit as NAL units each prefixed with its 4-byte big-endian length (any
    /// codec's: H.265's framing is the same), without the units equal to one of `leavingOut` (an
    /// `hvc1` track's parameter sets, which its sample entry holds).
    public static func lengthPrefixed(annexB data: [UInt8], leavingOut: [[UInt8]] = []) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + 16)
        for unit in nalUnits(annexB: data) where !leavingOut.contains(where: { unit.elementsEqual($0) }) {
            let n = UInt32(unit.count)
            out.append(contentsOf: [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)])
            out.append(contentsOf: unit)
        }
        return out
    }

    /// The NAL unit type (low 5 bits of the first byte), or nil for an empty unit.
    public static func nalType(_ unit: ArraySlice<UInt8>) -> UInt8? {
        unit.first.map { $0 & 0x1F }
    }

    /// The first SPS (type 7) and PPS (type 8) of an Annex-B access unit.
    public static func parameterSets(annexB data: [UInt8]) -> ParameterSets {
        var sets = ParameterSets()
        for unit in nalUnits(annexB: data) {
            switch nalType(unit) {
            case 7 where sets.sps == nil: sets.sps = Array(unit)
            case 8 where sets.pps == nil: sets.pps = Array(unit)
            default: break
            }
        }
        return sets
    }

    /// Whether an Annex-B access unit contains an IDR slice (type 5).
    public static func containsIDR(annexB data: [UInt8]) -> Bool {
        nalUnits(annexB: data).contains { nalType($0) == 5 }
    }
}
