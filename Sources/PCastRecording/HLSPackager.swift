// MARK: - Live HLS

/// A live HLS presentation (RFC 8216bis) with low-latency partial segments, built from fMP4
/// fragments as they are cut (see ``FMP4Fragmenter``): each fragment becomes one *part*; parts
/// gather into *segments* that start at a video keyframe once the segment is about
/// ``Settings/segmentTarget`` long (90 % of it: a 2 s GOP's timestamps may add up to a tick less) (or when one more part would pass ``Settings/targetDuration``,
/// which a stream with rare keyframes needs). A bounded window of segments is kept in memory; the
/// playlist lists the parts of the recent segments, with a preload hint for the next part (every
/// part stays fetchable while its segment is in the window, as the specification asks of a
/// server for three target durations after a part is no longer listed), and
/// ends with `EXT-X-ENDLIST` once ``end()`` is called.
///
/// Pure state: no clock, no I/O. The caller cuts fragments at most ``Settings/partCut`` long and
/// at every keyframe (`FMP4Fragmenter(tracks:fragmentDuration: 0, maxFragmentDuration: partCut)`),
/// serves ``playlist()`` and ``resource(named:)``, and holds blocking playlist reloads until
/// ``contains(_:)`` says the asked-for part is listed.
///
/// ```swift
/// var hls = try HLSPackager(tracks: tracks)
/// try hls.append(fragment)                 // each fragment the fragmenter cuts
/// let text = hls.playlist()                // index.m3u8
/// let part = hls.resource(named: "part3.1.m4s")
/// hls.end()                                // the stream ended: EXT-X-ENDLIST
/// ```
public struct HLSPackager: Sendable {
    public struct Settings: Sendable, Hashable {
        /// `PART-TARGET`: no part is longer.
        public var partTarget: Duration
        /// A segment is closed at the first keyframe once it is this long.
        public var segmentTarget: Duration
        /// `EXT-X-TARGETDURATION`, seconds: no segment is longer, rounded (it is cut without a
        /// keyframe rather than grow past it). Players reload the playlist about this often, so
        /// it is the segment target, not more.
        public var targetDuration: Int
        /// Segments listed and kept (parts are listed for the last ``partWindow`` closed ones, and
        /// served for all of them).
        public var window: Int
        public var partWindow: Int

        public init(partTarget: Duration = .milliseconds(500), segmentTarget: Duration = .seconds(2), targetDuration: Int = 2,
                    window: Int = 6, partWindow: Int = 2) {
            self.partTarget = partTarget
            self.segmentTarget = segmentTarget
            self.targetDuration = max(1, targetDuration)
            self.window = max(1, window)
            self.partWindow = max(0, min(partWindow, self.window))
        }

        /// Where the fragmenter should cut without a keyframe: 90 % of the part target, so a part
        /// that ends one frame after it is still within the target.
        public var partCut: Duration { partTarget * 0.9 }
        /// `PART-HOLD-BACK`: three part targets, as the specification recommends.
        public var partHoldBack: Duration { partTarget * 3 }
    }

    /// A part: its place, length in seconds, whether it starts with a keyframe, and its bytes
    /// (held by the part while its segment is open, then by the segment: ``range`` in it).
    public struct Part: Sendable, Hashable {
        public var sequence: Int
        public var index: Int
        /// Length in the primary track's timescale.
        public var ticks: UInt64
        public var duration: Double
        public var independent: Bool
        public var bytes: [UInt8]
        /// Where the part lies in its closed segment's bytes.
        public var range: Range<Int>?
    }

    /// A closed segment: its bytes are its parts' in order.
    public struct Segment: Sendable, Hashable {
        public var sequence: Int
        public var duration: Double
        public var independent: Bool
        public var bytes: [UInt8]
        public var parts: [Part]
    }

    /// A place in the presentation: a segment's media sequence number and, for a part, its index.
    public struct Position: Sendable, Hashable, CustomStringConvertible {
        public var sequence: Int
        public var part: Int?
        public init(sequence: Int, part: Int? = nil) {
            self.sequence = sequence
            self.part = part
        }
        public var description: String { part.map { "\(sequence).\($0)" } ?? "\(sequence)" }
    }

    public let settings: Settings
    public let tracks: [FMP4Track]
    /// `ftyp` + `moov`, served as `init.mp4`.
    public let initSegment: [UInt8]
    /// The closed segments in the window, oldest first.
    public private(set) var segments: [Segment] = []
    /// The parts of the segment being gathered.
    public private(set) var openParts: [Part] = []
    /// The media sequence number of the segment being gathered.
    public private(set) var openSequence = 0
    public private(set) var ended = false
    /// The `mfhd` sequence number of the next part (1-based, across the presentation).
    private var fragmentSequence: UInt32 = 1
    private let primary: FMP4Track

    public init(tracks: [FMP4Track], settings: Settings = Settings()) throws(FMP4Error) {
        guard let primary = tracks.first(where: { $0.kind == .video }) ?? tracks.first else {
            throw .invalidTrack(id: 0, reason: "a presentation needs at least one track")
        }
        self.tracks = tracks
        self.settings = settings
        self.primary = primary
        initSegment = try FMP4.initSegment(tracks: tracks).bytes
    }

    /// Adds a fragment as the next part. Fragments without a sample of the primary track (the
    /// video's, or the only track's) carry no time of their own and are refused.
    public mutating func append(_ fragment: FMP4Fragment) throws(FMP4Error) {
        guard !ended else { return }
        guard let run = fragment.runs.first(where: { $0.trackID == primary.id }), let first = run.samples.first else {
            throw .invalidSample(trackID: primary.id, reason: "a part needs a sample of track \(primary.id)")
        }
        let ticks = run.samples.reduce(UInt64(0)) { $0 + UInt64($1.duration) }
        let duration = seconds(ticks: ticks)
        let independent = primary.kind == .audio || first.isSync
        let bytes = try FMP4.fragment(sequence: fragmentSequence, runs: fragment.runs)
        fragmentSequence &+= 1
        let gathered = seconds(ticks: openParts.reduce(0) { $0 + $1.ticks })
        if !openParts.isEmpty,
           (independent && gathered >= Self.seconds(settings.segmentTarget) * 0.9) || gathered + duration > Self.longestSegment(settings.targetDuration) {
            closeSegment()
        }
        openParts.append(Part(sequence: openSequence, index: openParts.count, ticks: ticks, duration: duration, independent: independent, bytes: bytes))
    }

    private func seconds(ticks: UInt64) -> Double { Double(ticks) / Double(primary.timescale) }

    /// The longest a segment may be: its duration rounded to the nearest second must not pass
    /// the target duration (RFC 8216 §4.3.3.1).
    static func longestSegment(_ targetDuration: Int) -> Double { Double(targetDuration) + 0.49 }

    /// The stream ended: the parts gathered become the last segment and the playlist ends.
    public mutating func end() {
        guard !ended else { return }
        if !openParts.isEmpty { closeSegment() }
        ended = true
    }

    private mutating func closeSegment() {
        var parts = openParts, start = 0
        for index in parts.indices {
            parts[index].range = start..<(start + parts[index].bytes.count)
            start += parts[index].bytes.count
            parts[index].bytes = []
        }
        let segment = Segment(sequence: openSequence, duration: seconds(ticks: openParts.reduce(0) { $0 + $1.ticks }),
                              independent: openParts.first?.independent ?? false,
                              bytes: openParts.flatMap(\.bytes), parts: parts)
        segments.append(segment)
        openParts = []
        openSequence += 1
        if segments.count > settings.window { segments.removeFirst(segments.count - settings.window) }
    }

    /// The media sequence number of the first listed segment.
    public var mediaSequence: Int { segments.first?.sequence ?? openSequence }

    /// The next part to come (where a preload hint points); nil once ended.
    public var nextPart: Position? { ended ? nil : Position(sequence: openSequence, part: openParts.count) }

    /// Whether the playlist already lists `position` (a whole segment, or one part), so that a
    /// blocking reload asking for it (`_HLS_msn`, `_HLS_part`) can be answered. A part index past
    /// a closed segment's last part stands for the next segment's first part. Always true once
    /// ended: nothing more will come.
    public func contains(_ position: Position) -> Bool {
        if ended { return true }
        guard let part = position.part else { return position.sequence < openSequence }
        if position.sequence < openSequence {
            guard let segment = segments.first(where: { $0.sequence == position.sequence }) else { return true }
            return part < segment.parts.count || openSequence > position.sequence + 1 || !openParts.isEmpty
        }
        return position.sequence == openSequence && part < openParts.count
    }

    /// Whether a blocking reload for `position` may wait for it: at most two segments ahead of the
    /// one being gathered (the specification's rule; further is a bad request).
    public func mayWait(for position: Position) -> Bool {
        position.sequence <= openSequence + 2
    }

    /// Whether two whole segments are listed. Players refuse a playlist of parts alone as
    /// invalid (GStreamer's hlsdemux2, ffmpeg), and hlsdemux2 cannot follow a live playlist whose
    /// first version had a single segment: it matches each reload against the previous version
    /// from that version's second segment on, never its first, so it stops after one segment.
    public var isPlayable: Bool { segments.count >= 2 || ended && !segments.isEmpty }

    /// The media playlist (`index.m3u8`). `uriQuery` (without the `?`) is added to every URI.
    public func playlist(uriQuery: String? = nil) -> String {
        let suffix = uriQuery.map { "?" + $0 } ?? ""
        func partLine(_ part: Part) -> String {
            "#EXT-X-PART:DURATION=\(Self.format(part.duration)),URI=\"\(Self.partName(part.sequence, part.index))\(suffix)\""
                + (part.independent ? ",INDEPENDENT=YES" : "")
        }
        var lines = [
            "#EXTM3U",
            "#EXT-X-VERSION:9",
            "#EXT-X-TARGETDURATION:\(settings.targetDuration)",
            "#EXT-X-PART-INF:PART-TARGET=\(Self.format(Self.seconds(settings.partTarget)))",
            "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=\(Self.format(Self.seconds(settings.partHoldBack)))",
            "#EXT-X-MEDIA-SEQUENCE:\(mediaSequence)",
            "#EXT-X-MAP:URI=\"init.mp4\(suffix)\"",
        ]
        if segments.allSatisfy(\.independent), openParts.first?.independent ?? true {
            lines.insert("#EXT-X-INDEPENDENT-SEGMENTS", at: 2)
        }
        // Parts are listed for the last few segments only.
        let listed = Set(segments.suffix(settings.partWindow).map(\.sequence))
        for segment in segments {
            if listed.contains(segment.sequence) { lines += segment.parts.map(partLine) }
            lines.append("#EXTINF:\(Self.format(segment.duration)),")
            lines.append(Self.segmentName(segment.sequence) + suffix)
        }
        lines += openParts.map(partLine)
        if let next = nextPart, let index = next.part {
            lines.append("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"\(Self.partName(next.sequence, index))\(suffix)\"")
        }
        if ended { lines.append("#EXT-X-ENDLIST") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The multivariant playlist (`main.m3u8`): the presentation's one variant, `index.m3u8`, with
    /// what a player chooses by before it loads anything: `CODECS` (each track's
    /// ``FMP4Track/codecsString``), the video's `RESOLUTION`, and `BANDWIDTH` (the peak segment
    /// bit rate in the window, RFC 8216bis §4.4.6.2) with `AVERAGE-BANDWIDTH`. `uriQuery` is added
    /// to the variant's URI.
    public func multivariantPlaylist(uriQuery: String? = nil) -> String {
        let rates = segments.filter { $0.duration > 0 }.map { Double($0.bytes.count * 8) / $0.duration }
        var attributes = ["BANDWIDTH=\(Int((rates.max() ?? 0).rounded(.up)))",
                          "AVERAGE-BANDWIDTH=\(Int((rates.reduce(0, +) / Double(max(rates.count, 1))).rounded(.up)))",
                          "CODECS=\"\(tracks.map(\.codecsString).joined(separator: ","))\""]
        if let (width, height) = tracks.lazy.compactMap(\.pictureSize).first { attributes.append("RESOLUTION=\(width)x\(height)") }
        return ["#EXTM3U", "#EXT-X-VERSION:9", "#EXT-X-INDEPENDENT-SEGMENTS",
                "#EXT-X-STREAM-INF:" + attributes.joined(separator: ","),
                "index.m3u8" + (uriQuery.map { "?" + $0 } ?? "")].joined(separator: "\n") + "\n"
    }

    /// What a resource name of the playlist stands for.
    public enum Resource: Sendable, Hashable {
        case initSegment
        case segment(Int)
        case part(Int, Int)

        /// Parses `init.mp4`, `seg<N>.m4s` or `part<N>.<I>.m4s`; nil for anything else.
        public init?(name: String) {
            if name == "init.mp4" { self = .initSegment; return }
            guard name.hasSuffix(".m4s") else { return nil }
            let stem = name.dropLast(4)
            if stem.hasPrefix("seg"), let sequence = Self.number(stem.dropFirst(3)) {
                self = .segment(sequence)
            } else if stem.hasPrefix("part") {
                let fields = stem.dropFirst(4).split(separator: ".", omittingEmptySubsequences: false)
                guard fields.count == 2, let sequence = Self.number(fields[0]), let index = Self.number(fields[1]) else { return nil }
                self = .part(sequence, index)
            } else {
                return nil
            }
        }

        /// Decimal digits only (no sign, no spaces), at most 9 of them.
        static func number(_ text: Substring) -> Int? {
            guard !text.isEmpty, text.count <= 9, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int(text)
        }

        /// The position a request for this resource waits for (a part or segment not yet cut).
        public var position: Position? {
            switch self {
            case .initSegment: return nil
            case .segment(let sequence): return Position(sequence: sequence)
            case .part(let sequence, let index): return Position(sequence: sequence, part: index)
            }
        }
    }

    /// The bytes of `init.mp4`, a segment or a part in the window; nil for anything else (not
    /// listed yet, or gone from the window).
    public func resource(named name: String) -> [UInt8]? {
        guard let resource = Resource(name: name) else { return nil }
        return self.resource(resource)
    }

    public func resource(_ resource: Resource) -> [UInt8]? {
        switch resource {
        case .initSegment:
            return initSegment
        case .segment(let sequence):
            return segments.first { $0.sequence == sequence }?.bytes
        case .part(let sequence, let index):
            if sequence == openSequence { return openParts.indices.contains(index) ? openParts[index].bytes : nil }
            guard let segment = segments.first(where: { $0.sequence == sequence }), segment.parts.indices.contains(index),
                  let range = segment.parts[index].range else { return nil }
            return Array(segment.bytes[range])
        }
    }

    /// Whether a resource not there now may still come (a part or segment at or after the next
    /// one): a request for it may wait, as a preload hint asks.
    public func mayCome(_ resource: Resource) -> Bool {
        guard !ended, let position = resource.position else { return false }
        if position.sequence > openSequence { return mayWait(for: position) }
        if position.sequence == openSequence { return position.part.map { $0 >= openParts.count } ?? true }
        return false
    }

    public static func segmentName(_ sequence: Int) -> String { "seg\(sequence).m4s" }
    public static func partName(_ sequence: Int, _ index: Int) -> String { "part\(sequence).\(index).m4s" }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// Seconds with five decimals, as the examples of the specification write them.
    static func format(_ seconds: Double) -> String {
        let scaled = Int((seconds * 100_000).rounded())
        let whole = scaled / 100_000, fraction = scaled % 100_000
        let digits = String(fraction)
        return "\(whole)." + String(repeating: "0", count: 5 - digits.count) + digits
    }
}
