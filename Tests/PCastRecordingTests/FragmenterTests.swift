// FMP4Fragmenter: timeline rebasing, durations, cutting, dropping, clamping.

import PCastTestSupport
import Testing
@testable import PCastRecording

let ms: UInt64 = 1_000_000
let testSPS: [UInt8] = [0x67, 0x64, 0x00, 0x1F, 0xAC, 0xD9]
let testPPS: [UInt8] = [0x68, 0xEB, 0xE3, 0xCB]
let video = FMP4Track(id: 1, timescale: 90_000, codec: .h264(width: 320, height: 240, sps: testSPS, pps: testPPS))
let audio = FMP4Track(id: 2, timescale: 48_000, codec: .opus(channels: 2, sampleRate: 48_000, preSkip: 312))

func videoUnit(_ t: UInt64, key: Bool = false, pts: UInt64? = nil) -> FMP4Fragmenter.AccessUnit {
    .init(trackID: 1, pts: pts ?? t, dts: t, isKeyframe: key, data: [0, 0, 0, 1, key ? 0x65 : 0x41])
}

func audioUnit(_ t: UInt64) -> FMP4Fragmenter.AccessUnit {
    .init(trackID: 2, pts: t, isKeyframe: true, data: [0xFC, 0x01])
}

/// Pushes everything, flushes, and returns all fragments.
func fragments(_ fragmenter: inout FMP4Fragmenter, _ units: [FMP4Fragmenter.AccessUnit]) -> [FMP4Fragment] {
    var out = units.compactMap { fragmenter.push($0) }
    if let last = fragmenter.flush() { out.append(last) }
    return out
}

func samples(_ fragments: [FMP4Fragment], track: UInt32) -> [FMP4Sample] {
    fragments.flatMap { $0.runs.filter { $0.trackID == track }.flatMap(\.samples) }
}

/// 25 fps video from `start`, keyframe every `gop` frames.
func videoUnits(count: Int, gop: Int, start: UInt64 = 0) -> [FMP4Fragmenter.AccessUnit] {
    (0..<count).map { videoUnit(start + UInt64($0) * 40 * ms, key: $0 % gop == 0) }
}

struct FragmenterTests {
    @Test func durationsComeFromTheNextSampleOfTheSameTrack() {
        var f = FMP4Fragmenter(tracks: [video])
        let out = fragments(&f, [videoUnit(0, key: true), videoUnit(40 * ms), videoUnit(100 * ms)])
        let s = samples(out, track: 1)
        #expect(s.map(\.decodeTime) == [0, 3600, 9000])
        #expect(s.map(\.duration) == [3600, 5400, 5400])  // last one repeats the previous duration
        #expect(s.map(\.isSync) == [true, false, false])
    }

    @Test func aLoneSampleGetsTheDefaultDuration() {
        var v = FMP4Fragmenter(tracks: [video])
        #expect(samples(fragments(&v, [videoUnit(7 * ms, key: true)]), track: 1).map(\.duration) == [3000])
        var a = FMP4Fragmenter(tracks: [audio])
        #expect(samples(fragments(&a, [audioUnit(7 * ms)]), track: 2).map(\.duration) == [960])
    }

    @Test func cutsAtTheFirstKeyframeOnceTheFragmentIsLongEnough() {
        var f = FMP4Fragmenter(tracks: [video])
        let out = fragments(&f, videoUnits(count: 75, gop: 10))  // keyframes every 0.4 s
        #expect(out.map(\.sampleCount) == [30, 30, 15])  // cut at 1.2 s and 2.4 s
        for fragment in out {
            #expect(fragment.runs[0].samples.first?.isSync == true)
        }
        #expect(out.map { $0.runs[0].samples[0].decodeTime } == [0, 108_000, 216_000])
    }

    @Test func holdsTheHeldBackSampleForTheNextFragment() {
        var f = FMP4Fragmenter(tracks: [video, audio])
        var units: [FMP4Fragmenter.AccessUnit] = []
        for i in 0..<50 {
            units.append(audioUnit(UInt64(i) * 20 * ms))
            if i % 2 == 0 { units.append(videoUnit(UInt64(i) * 20 * ms, key: i % 50 == 0)) }
        }
        units.append(videoUnit(1000 * ms, key: true))
        let cut = units.compactMap { f.push($0) }
        #expect(cut.count == 1)
        let first = cut[0]
        #expect(first.runs.map(\.trackID) == [1, 2])
        #expect(first.runs[0].samples.count == 25)
        #expect(first.runs[0].endDecodeTime == 90_000)
        // Audio up to the keyframe, except the last packet which waits for its duration.
        #expect(first.runs[1].samples.count == 49)
    }

    @Test func dropsEverythingBeforeTheFirstVideoKeyframe() {
        var f = FMP4Fragmenter(tracks: [video, audio])
        let base = 5_000 * ms
        let units: [FMP4Fragmenter.AccessUnit] = [
            audioUnit(base), videoUnit(base + 20 * ms),  // before the keyframe
            audioUnit(base + 40 * ms), videoUnit(base + 60 * ms),
            audioUnit(base + 80 * ms),  // same time as the keyframe, arrives first: kept
            videoUnit(base + 80 * ms, key: true),
            audioUnit(base + 100 * ms), videoUnit(base + 120 * ms),
        ]
        let out = fragments(&f, units)
        #expect(samples(out, track: 1).map(\.decodeTime) == [0, 3600])
        #expect(samples(out, track: 2).map(\.decodeTime) == [0, 960])
        #expect(f.droppedCount == 4)
    }

    @Test func audioOnlyStartsAtTheFirstPacketAndCutsEverySecond() {
        var f = FMP4Fragmenter(tracks: [audio])
        let out = fragments(&f, (0..<150).map { audioUnit(777 * ms + UInt64($0) * 20 * ms) })
        #expect(out.map(\.sampleCount) == [50, 50, 50])
        #expect(samples(out, track: 2).first?.decodeTime == 0)
        #expect(out.last?.runs[0].endDecodeTime == 144_000)
    }

    @Test func startOffsetShiftsEveryTrackEqually() {
        var f = FMP4Fragmenter(tracks: [video, audio], startOffset: 5_000 * ms)
        let out = fragments(&f, [videoUnit(1_000_000 * ms, key: true), audioUnit(1_000_000 * ms + 20 * ms)])
        #expect(samples(out, track: 1).first?.decodeTime == 450_000)
        #expect(samples(out, track: 2).first?.decodeTime == 240_960)
        #expect(f.endNanoseconds == 5_040 * ms)
    }

    @Test func backwardsTimestampsNeverMakeDecodeTimesDecrease() throws {
        var f = FMP4Fragmenter(tracks: [video])
        let times: [UInt64] = [0, 40, 20, 20, 30, 120, 119, 200]
        let out = fragments(&f, times.enumerated().map { videoUnit($1 * ms, key: $0 == 0) })
        let s = samples(out, track: 1)
        #expect(s.count == times.count)
        for (a, b) in zip(s, s.dropFirst()) {
            #expect(b.decodeTime == a.decodeTime + UInt64(a.duration))
            #expect(a.duration >= 1)
        }
        for fragment in out { _ = try FMP4.fragment(sequence: 1, runs: fragment.runs) }
    }

    @Test func compositionOffsetIsPtsMinusDts() {
        var f = FMP4Fragmenter(tracks: [video])
        // I P B B with 2-frame reorder delay: DTS 0,40,80,120; PTS 80,200,120,160
        let units = [videoUnit(0, key: true, pts: 80 * ms), videoUnit(40 * ms, pts: 200 * ms),
                     videoUnit(80 * ms, pts: 120 * ms), videoUnit(120 * ms, pts: 160 * ms)]
        let s = samples(fragments(&f, units), track: 1)
        #expect(s.map(\.compositionOffset) == [7200, 14400, 3600, 3600])
    }

    @Test func aLongGroupOfPicturesIsCutAtTheMaximumFragmentDuration() {
        var f = FMP4Fragmenter(tracks: [video], maxFragmentDuration: 2_000 * ms)
        let out = fragments(&f, videoUnits(count: 125, gop: 1000))  // one keyframe in 5 s
        #expect(out.map(\.sampleCount) == [50, 50, 25])
    }

    @Test func unknownTracksAreDropped() {
        var f = FMP4Fragmenter(tracks: [video])
        _ = f.push(videoUnit(0, key: true))
        _ = f.push(audioUnit(0))
        #expect(f.droppedCount == 1)
    }

    /// Whatever the timestamps, every fragment is writable and tracks stay contiguous.
    @Test func randomTimestampsAlwaysGiveValidContiguousFragments() throws {
        var rng = SeededRNG(seed: 42)
        for _ in 0..<50 {
            var f = FMP4Fragmenter(tracks: [video, audio], fragmentDuration: 300 * ms)
            var units: [FMP4Fragmenter.AccessUnit] = []
            for _ in 0..<200 {
                let t = rng.next() % (4_000 * ms)
                let unit = rng.next() % 2 == 0
                    ? videoUnit(t, key: rng.next() % 8 == 0, pts: t + rng.next() % (100 * ms))
                    : audioUnit(t)
                units.append(unit)
            }
            let out = fragments(&f, units)
            for fragment in out { _ = try FMP4.fragment(sequence: 1, runs: fragment.runs) }
            for track: UInt32 in [1, 2] {
                let s = samples(out, track: track)
                for (a, b) in zip(s, s.dropFirst()) {
                    #expect(b.decodeTime == a.decodeTime + UInt64(a.duration))
                }
            }
        }
    }
}

