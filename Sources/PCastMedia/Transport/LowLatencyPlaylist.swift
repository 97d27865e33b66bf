import Foundation

/// A low-latency HLS media playlist (RFC 8216bis) as a part-following player reads it: its parts
/// by position (media sequence number, part index), which are independent, the initialisation
/// section, and whether it ended. Pure: parsing and the follower's decisions, no I/O.
package struct LowLatencyPlaylist: Sendable, Hashable {
    /// A part's place: its segment's media sequence number and its index within the segment.
    package struct Position: Sendable, Hashable, Comparable, CustomStringConvertible {
        package var sequence: Int
        package var part: Int
        package init(_ sequence: Int, _ part: Int) {
            self.sequence = sequence
            self.part = part
        }
        package static func < (a: Self, b: Self) -> Bool { (a.sequence, a.part) < (b.sequence, b.part) }
        package var description: String { "\(sequence).\(part)" }
    }

    package struct Part: Sendable, Hashable {
        package var uri: String
        package var independent: Bool
    }

    /// `#EXT-X-MAP`'s URI.
    package var map: String?
    package var parts: [Position: Part] = [:]
    /// Segments complete (listed with `#EXTINF`), by media sequence number, with their part counts
    /// (0 when the playlist no longer lists their parts).
    package var completeSegments: [Int: Int] = [:]
    /// Where the part after the last listed one will be: the segment being cut and its next index.
    package var nextPosition: Position
    package var ended = false
    /// `#EXT-X-PART-INF:PART-TARGET`, seconds.
    package var partTarget: Double?

    package struct Malformed: Error, CustomStringConvertible {
        package let description: String
    }

    /// Parses `text`; throws when it is not a media playlist with parts.
    package init(parsing text: String) throws(Malformed) {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        guard lines.first == "#EXTM3U" else { throw Malformed(description: "not a playlist (no #EXTM3U)") }
        var sequence = 0
        var pending: [Part] = []
        var segmentPending = false
        for line in lines {
            if line.hasPrefix("#EXT-X-MEDIA-SEQUENCE:") {
                guard let value = Int(line.dropFirst("#EXT-X-MEDIA-SEQUENCE:".count)) else { throw Malformed(description: "a bad media sequence: \(line)") }
                sequence = value
            } else if line.hasPrefix("#EXT-X-MAP:") {
                map = Self.attribute("URI", in: line)
            } else if line.hasPrefix("#EXT-X-PART-INF:") {
                partTarget = Self.attribute("PART-TARGET", in: line).flatMap(Double.init)
            } else if line.hasPrefix("#EXT-X-PART:") {
                guard let uri = Self.attribute("URI", in: line) else { throw Malformed(description: "a part without a URI: \(line)") }
                pending.append(Part(uri: uri, independent: Self.attribute("INDEPENDENT", in: line) == "YES"))
            } else if line.hasPrefix("#EXTINF:") {
                segmentPending = true
            } else if line == "#EXT-X-ENDLIST" {
                ended = true
            } else if !line.hasPrefix("#"), !line.isEmpty, segmentPending {
                // A segment's URI: the parts before it were its own.
                for (index, part) in pending.enumerated() { parts[Position(sequence, index)] = part }
                completeSegments[sequence] = pending.count
                pending = []
                segmentPending = false
                sequence += 1
            }
        }
        for (index, part) in pending.enumerated() { parts[Position(sequence, index)] = part }
        nextPosition = Position(sequence, pending.count)
    }

    /// The part that comes after `position`: the next index, or the next segment's first once
    /// `position` was its segment's last part.
    package func successor(of position: Position) -> Position {
        if let count = completeSegments[position.sequence], count > 0, position.part + 1 >= count {
            return Position(position.sequence + 1, 0)
        }
        return Position(position.sequence, position.part + 1)
    }

    /// `position`, or (when its segment turned out to end before it: the last part of a segment
    /// is known only once the segment is complete) the next segment's first part.
    package func normalised(_ position: Position) -> Position {
        var position = position
        while let count = completeSegments[position.sequence], count > 0, position.part >= count {
            position = Position(position.sequence + 1, 0)
        }
        return position
    }

    /// The first independent part at or after `position` that the playlist lists.
    package func firstIndependent(atOrAfter position: Position) -> Position? {
        parts.filter { $0.key >= position && $0.value.independent }.keys.min()
    }

    /// The value of attribute `name` in a tag line (quoted or not).
    static func attribute(_ name: String, in line: String) -> String? {
        guard let colon = line.firstIndex(of: ":") else { return nil }
        var rest = line[line.index(after: colon)...]
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else { return nil }
            let key = rest[..<equals].trimmingCharacters(in: .whitespaces)
            rest = rest[rest.index(after: equals)...]
            let value: Substring
            if rest.first == "\"" {
                let body = rest.dropFirst()
                guard let close = body.firstIndex(of: "\"") else { return nil }
                value = body[..<close]
                rest = body[body.index(after: close)...]
                if rest.first == "," { rest = rest.dropFirst() }
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                value = rest[..<end]
                rest = end == rest.endIndex ? rest[end...] : rest[rest.index(after: end)...]
            }
            if key == name { return String(value) }
        }
        return nil
    }
}
