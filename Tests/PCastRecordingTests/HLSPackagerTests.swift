// HLSPackager: parts, segments at keyframes, the window, blocking-reload positions, the playlist.

import Testing
@testable import PCastRecording

/// Cuts `units` as the live packaging does (every keyframe, at most the part cut) and packages them.
func packaged(_ units: [FMP4Fragmenter.AccessUnit], tracks: [FMP4Track] = [video], settings: HLSPackager.Settings = .init(),
              end: Bool = false) throws -> HLSPackager {
    let cut = UInt64(settings.partCut.components.attoseconds / 1_000_000_000) + UInt64(settings.partCut.components.seconds) * 1_000_000_000
    var fragmenter = FMP4Fragmenter(tracks: tracks, fragmentDuration: tracks.contains { $0.kind == .video } ? 0 : cut, maxFragmentDuration: cut)
    var hls = try HLSPackager(tracks: tracks, settings: settings)
    for unit in units {
        if let fragment = fragmenter.push(unit) { try hls.append(fragment) }
    }
    if end {
        if let last = fragmenter.flush() { try hls.append(last) }
        hls.end()
    }
    return hls
}

/// The playlist's lines that start with `tag`.
func lines(_ playlist: String, _ tag: String) -> [String] {
    playlist.split(separator: "\n").map(String.init).filter { $0.hasPrefix(tag) }
}

func attribute(_ line: String, _ name: String) -> String? {
    let body = line.drop { $0 != ":" }.dropFirst()
    for field in body.split(separator: ",") where field.hasPrefix(name + "=") {
        return String(field.dropFirst(name.count + 1)).trimmingCharacters(in: ["\""])
    }
    return nil
}

struct HLSPackagerTests {
    @Test("25 fps with a keyframe every 2 s: segments of 2 s that start at keyframes, parts of at most the 0.5 s target (0.48 s), independent at each segment start")
    func segmentsAtKeyframes() throws {
        let hls = try packaged(videoUnits(count: 25 * 7, gop: 50))   // 7 s: keyframes at 0, 2, 4, 6 s
        #expect(hls.segments.map(\.sequence) == [0, 1, 2])
        #expect(hls.segments.map(\.duration) == [2, 2, 2])
        #expect(hls.segments.allSatisfy { $0.independent })
        for segment in hls.segments {
            #expect(segment.parts.first?.independent == true)
            #expect(segment.parts.dropFirst().allSatisfy { !$0.independent })
            #expect(segment.parts.allSatisfy { $0.duration <= 0.5 })
            #expect(segment.parts.map(\.duration) == [0.48, 0.48, 0.48, 0.48, 0.08])
            let partBytes = segment.parts.indices.compactMap { hls.resource(.part(segment.sequence, $0)) }
            #expect(segment.bytes == partBytes.flatMap { $0 }, "a segment is its parts in order")
        }
        #expect(hls.openSequence == 3 && hls.openParts.count == 2, "6.0–6.48 and 6.48–6.96 s; the last frame waits for its duration")
        #expect(hls.nextPart == .init(sequence: 3, part: 2))
    }

    @Test("the playlist: version, target and part durations, blocking reload with a part hold-back of three part targets, the init map, parts then EXTINF per segment, a preload hint for the next part; EXT-X-ENDLIST and no hint once ended")
    func playlistText() throws {
        var hls = try packaged(videoUnits(count: 25 * 5, gop: 50))
        let live = hls.playlist()
        let all = live.split(separator: "\n").map(String.init)
        #expect(all.prefix(8) == ["#EXTM3U", "#EXT-X-VERSION:9", "#EXT-X-INDEPENDENT-SEGMENTS", "#EXT-X-TARGETDURATION:2",
                                  "#EXT-X-PART-INF:PART-TARGET=0.50000",
                                  "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.50000",
                                  "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-MAP:URI=\"init.mp4\""])
        #expect(lines(live, "#EXTINF") == ["#EXTINF:2.00000,", "#EXTINF:2.00000,"])
        #expect(all.contains("seg0.m4s") && all.contains("seg1.m4s") && !all.contains("seg2.m4s"))
        let parts = lines(live, "#EXT-X-PART:")
        #expect(parts.first == "#EXT-X-PART:DURATION=0.48000,URI=\"part0.0.m4s\",INDEPENDENT=YES")
        #expect(parts.count == 5 + 5 + hls.openParts.count)
        #expect(lines(live, "#EXT-X-PRELOAD-HINT") == ["#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part2.\(hls.openParts.count).m4s\""])
        #expect(lines(live, "#EXT-X-ENDLIST").isEmpty)
        // Every URI listed is served.
        for uri in parts.compactMap({ attribute($0, "URI") }) + ["seg0.m4s", "seg1.m4s", "init.mp4"] {
            #expect(hls.resource(named: uri) != nil, "\(uri)")
        }

        hls.end()
        let ended = hls.playlist()
        #expect(ended.hasSuffix("#EXT-X-ENDLIST\n"))
        #expect(lines(ended, "#EXT-X-PRELOAD-HINT").isEmpty)
        #expect(lines(ended, "#EXTINF").count == 3, "the open parts became the last segment")
        #expect(hls.nextPart == nil)
    }

    @Test("the multivariant playlist names index.m3u8 (with the query) and what a player picks it by: CODECS of every track (avc3 with the SPS's profile, constraints and level; Opus), the video's RESOLUTION, BANDWIDTH the peak and AVERAGE-BANDWIDTH the mean segment bit rate")
    func multivariantPlaylist() throws {
        let hls = try packaged(videoUnits(count: 25 * 7, gop: 50), tracks: [video, audio])
        let rates = hls.segments.map { Double($0.bytes.count * 8) / $0.duration }
        #expect(rates.count == 3 && rates.allSatisfy { $0 > 0 })
        let text = hls.multivariantPlaylist(uriQuery: "token=abc")
        #expect(text.split(separator: "\n").map(String.init) == [
            "#EXTM3U", "#EXT-X-VERSION:9", "#EXT-X-INDEPENDENT-SEGMENTS",
            "#EXT-X-STREAM-INF:BANDWIDTH=\(Int(rates.max()!.rounded(.up))),AVERAGE-BANDWIDTH=\(Int((rates.reduce(0, +) / 3).rounded(.up))),"
                + "CODECS=\"avc3.64001f,Opus\",RESOLUTION=320x240",
            "index.m3u8?token=abc",
        ])
    }

    @Test("the init segment and the segments in order scan as one valid fragmented MP4 whose end is the playlist's total duration")
    func segmentsFormAFile() throws {
        let hls = try packaged(videoUnits(count: 25 * 6, gop: 50) + [videoUnit(6000 * ms, key: true)], end: true)
        let bytes = hls.initSegment + hls.segments.flatMap(\.bytes)
        let scan = try FMP4.scan(bytes)
        #expect(scan.tracks.map(\.id) == [1])
        #expect(scan.fragmentCount == 16, "five parts in each of three segments, and the last frame's")
        let total = hls.segments.reduce(0) { $0 + $1.duration }
        #expect(abs(Double(scan.endNanoseconds) / 1e9 - total) < 0.001, "\(scan.endNanoseconds) ns against \(total) s")
        #expect(scan.lastSequence == UInt32(scan.fragmentCount), "mfhd sequence numbers run on across parts")
    }

    @Test("the window keeps six segments (older ones are gone and MEDIA-SEQUENCE moves on); parts are listed for the last two closed segments and the open one only, and served while their segment is in the window")
    func window() throws {
        let hls = try packaged(videoUnits(count: 25 * 21, gop: 50))   // 10 closed segments
        #expect(hls.segments.map(\.sequence) == Array(4...9))
        #expect(hls.mediaSequence == 4)
        #expect(hls.playlist().contains("#EXT-X-MEDIA-SEQUENCE:4\n"))
        #expect(hls.resource(named: "seg3.m4s") == nil && hls.resource(named: "seg4.m4s") != nil)
        #expect(hls.resource(named: "part3.0.m4s") == nil && hls.resource(named: "part4.0.m4s") != nil && hls.resource(named: "part8.0.m4s") != nil)
        let listed = Set(lines(hls.playlist(), "#EXT-X-PART:").compactMap { attribute($0, "URI")?.split(separator: ".").first })
        #expect(listed == ["part8", "part9", "part10"])
    }

    @Test("keyframes every 10 s: segments are cut without one before they pass the 2 s target once rounded (2.4 s; not independent, so no EXT-X-INDEPENDENT-SEGMENTS), none longer")
    func rareKeyframes() throws {
        let hls = try packaged(videoUnits(count: 25 * 13, gop: 250))
        #expect(!hls.segments.isEmpty)
        #expect(hls.segments.allSatisfy { $0.duration < 2.5 })
        // 0–9.6 s in four cuts of five 0.48 s parts; then 9.6–10 s, the keyframe at 10 s too early
        // to start a segment, and parts up to 11.92 s.
        #expect(hls.segments.map { ($0.duration * 100).rounded() / 100 } == [2.4, 2.4, 2.4, 2.4, 2.32], "\(hls.segments.map(\.duration))")
        #expect(hls.segments.first?.independent == true)
        #expect(hls.segments.dropFirst().contains { !$0.independent })
        #expect(!hls.playlist().contains("#EXT-X-INDEPENDENT-SEGMENTS"))
    }

    @Test("audio alone: parts every 0.46 s, all independent, segments of about 2 s")
    func audioOnly() throws {
        let units = (0..<300).map { audioUnit(UInt64($0) * 20 * ms) }   // 6 s of 20 ms packets
        let hls = try packaged(units, tracks: [audio])
        #expect(hls.segments.allSatisfy { $0.parts.allSatisfy { $0.independent } })
        #expect(hls.segments.allSatisfy { abs($0.duration - 2) < 0.5 })
        #expect(hls.segments.flatMap(\.parts).map(\.duration).allSatisfy { $0 == 0.46 })
    }

    @Test("blocking reload: a listed part or segment is contained, the next one is not; a part index past a closed segment's last part stands for the next segment's first; more than two segments ahead may not wait; everything is contained once ended")
    func blockingPositions() throws {
        var hls = try packaged(videoUnits(count: 25 * 5, gop: 50))   // seg0, seg1 closed; seg2 has parts
        let open = hls.openParts.count
        #expect(hls.contains(.init(sequence: 1)) && !hls.contains(.init(sequence: 2)))
        #expect(hls.contains(.init(sequence: 2, part: open - 1)) && !hls.contains(.init(sequence: 2, part: open)))
        #expect(hls.contains(.init(sequence: 1, part: 5)), "seg1 has parts 0…4: part 5 is seg2's part 0, which is listed")
        #expect(hls.mayWait(for: .init(sequence: 4)) && !hls.mayWait(for: .init(sequence: 5)))
        #expect(hls.mayCome(.part(2, open)) && hls.mayCome(.part(3, 0)) && !hls.mayCome(.part(1, 0)))
        #expect(!hls.mayCome(.initSegment))
        hls.end()
        #expect(hls.contains(.init(sequence: 4, part: 0)))
        #expect(!hls.mayCome(.part(3, 0)))
    }

    @Test("resource names: init.mp4, seg<N>.m4s, part<N>.<I>.m4s and nothing else (no signs, paths, other suffixes or huge numbers)")
    func resourceNames() {
        #expect(HLSPackager.Resource(name: "init.mp4") == .initSegment)
        #expect(HLSPackager.Resource(name: "seg12.m4s") == .segment(12))
        #expect(HLSPackager.Resource(name: "part12.3.m4s") == .part(12, 3))
        for bad in ["seg-1.m4s", "seg.m4s", "seg1.mp4", "part1.m4s", "part1.2.3.m4s", "part1..m4s", "../seg1.m4s", "seg+1.m4s",
                    "seg1234567890.m4s", "index.m3u8", "", "init.mp4 ", "seg 1.m4s"] {
            #expect(HLSPackager.Resource(name: bad) == nil, "\(bad)")
        }
    }

    @Test("a fragment without a sample of the video track is refused and changes nothing")
    func fragmentWithoutVideo() throws {
        var hls = try HLSPackager(tracks: [video, audio])
        let audioOnly = FMP4Fragment(runs: [FMP4TrackRun(trackID: 2, samples: [FMP4Sample(decodeTime: 0, compositionOffset: 0, duration: 960, isSync: true, data: [1])])])
        #expect(throws: FMP4Error.self) { try hls.append(audioOnly) }
        #expect(hls.openParts.isEmpty && !hls.isPlayable)
        #expect(throws: FMP4Error.self) { _ = try HLSPackager(tracks: []) }
    }
}
