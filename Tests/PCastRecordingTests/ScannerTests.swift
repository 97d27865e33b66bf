// FMP4.scan: recovery information, and robustness on torn, hostile or foreign input.

import PCastTestSupport
import Testing
@testable import PCastRecording

/// An in-memory recording: init segment + 2 fragments, and where each part ends.
struct SmallRecording {
    var bytes: [UInt8]
    var initEnd: Int
    var firstEnd: Int

    static func make() throws -> SmallRecording {
        let initSegment = try FMP4.initSegment(tracks: [video, audio]).bytes
        let first = try FMP4.fragment(sequence: 1, runs: [
            run(1, from: 0, count: 3, duration: 3000, size: 40),
            run(2, from: 0, count: 4, duration: 960, size: 10),
        ])
        let second = try FMP4.fragment(sequence: 2, runs: [
            run(1, from: 9000, count: 3, duration: 3000, size: 30),
            run(2, from: 3840, count: 4, duration: 960, size: 10),
        ])
        return SmallRecording(bytes: initSegment + first + second, initEnd: initSegment.count,
                              firstEnd: initSegment.count + first.count)
    }

    static func run(_ id: UInt32, from start: UInt64, count: Int, duration: UInt32, size: Int) -> FMP4TrackRun {
        FMP4TrackRun(trackID: id, samples: (0..<count).map { i in
            FMP4Sample(decodeTime: start + UInt64(i) * UInt64(duration), duration: duration,
                       isSync: i == 0, data: [UInt8](repeating: UInt8(i + 1), count: size))
        })
    }
}

struct ScannerTests {
    @Test func reportsTracksEndsAndTheLastSequence() throws {
        let file = try SmallRecording.make()
        let scan = try FMP4.scan(file.bytes)
        #expect(scan.hasMovie && scan.tail == .none)
        #expect(scan.fragmentCount == 2 && scan.lastSequence == 2)
        #expect(scan.trackEnds == [1: 18000, 2: 7680])
        #expect(scan.completeEnd == UInt64(file.bytes.count))
        #expect(scan.endNanoseconds == 200_000_000)
        #expect(scan.movieTimescale == 1000)
    }

    /// Every prefix of a valid file is what a torn write can leave: it must scan without an
    /// error, and the complete part must end at the last boundary inside the prefix.
    @Test func everyTruncationOfATwoFragmentFileScansToTheLastCompleteFragment() throws {
        let file = try SmallRecording.make()
        let boundaries = [file.initEnd, file.firstEnd, file.bytes.count]
        let cleanCuts = [0, Int(u32(file.bytes, 0))] + boundaries  // cuts that end on a box boundary
        var failures: [String] = []
        for cut in 0...file.bytes.count {
            do {
                let scan = try FMP4.scan(Array(file.bytes[0..<cut]))
                let expectedEnd = boundaries.last { $0 <= cut } ?? 0
                let expectedFragments = boundaries.filter { $0 <= cut }.count - 1
                if scan.completeEnd != UInt64(expectedEnd) || scan.fragmentCount != max(0, expectedFragments)
                    || scan.hasMovie != (cut >= file.initEnd)
                    || (scan.tail == .none) != cleanCuts.contains(cut) {
                    failures.append("cut \(cut): end \(scan.completeEnd) fragments \(scan.fragmentCount) tail \(scan.tail)")
                }
                if cut >= file.firstEnd && cut < file.bytes.count, scan.trackEnds != [1: 9000, 2: 3840] {
                    failures.append("cut \(cut): track ends \(scan.trackEnds)")
                }
            } catch {
                failures.append("cut \(cut): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(10))")
    }

    @Test func randomGarbageNeverCrashes() {
        var rng = SeededRNG(seed: 7)
        let ftyp: [UInt8] = [0, 0, 0, 16] + Array("ftypiso6".utf8) + [0, 0, 0, 0]
        for round in 0..<3000 {
            let count = Int(rng.next() % 400)
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if round % 2 == 0 { bytes = ftyp + bytes }
            _ = try? FMP4.scan(bytes)
        }
    }

    /// Random byte changes in a valid file: a result or a typed error, never a crash or hang.
    @Test func mutatedFilesNeverCrash() throws {
        let file = try SmallRecording.make()
        var rng = SeededRNG(seed: 11)
        for _ in 0..<3000 {
            var bytes = file.bytes
            for _ in 0..<(1 + rng.next() % 4) {
                let index = Int(rng.next() % UInt64(bytes.count))
                bytes[index] = rng.next() % 3 == 0 ? 0xFF : UInt8(truncatingIfNeeded: rng.next())
            }
            if let scan = try? FMP4.scan(bytes) {
                #expect(scan.completeEnd <= UInt64(bytes.count))
            }
        }
    }

    @Test func aBoxLargerThanTheFileIsATornTail() throws {
        let file = try SmallRecording.make()
        let bytes = file.bytes + [0xFF, 0xFF, 0xFF, 0xFF] + Array("moof".utf8) + [1, 2, 3]
        let scan = try FMP4.scan(bytes)
        #expect(scan.completeEnd == UInt64(file.bytes.count))
        #expect(scan.tail == .incompleteBox(offset: UInt64(file.bytes.count)))
        let huge = file.bytes + [0, 0, 0, 1] + Array("mdat".utf8) + [0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
        #expect(try FMP4.scan(huge).tail == .incompleteBox(offset: UInt64(file.bytes.count)))
    }

    @Test func largesizeBoxesAreFollowed() throws {
        let file = try SmallRecording.make()
        // Rewrite the first mdat with a 16-byte header (size 1 + largesize), shifting the
        // trun data offsets that point into it.
        var first = Array(file.bytes[file.initEnd..<file.firstEnd])
        let moofSize = Int(u32(first, 0))
        var search = 0
        while let trun = boxOffset(Array(first[search..<moofSize]), "trun") {
            let at = search + trun + 16
            let patched = u32(first, at) + 8
            for i in 0..<4 { first[at + i] = UInt8(truncatingIfNeeded: patched >> UInt32(24 - 8 * i)) }
            search += trun + 8
        }
        let payload = Array(first[(moofSize + 8)...])
        let largeHeader: [UInt8] = [0, 0, 0, 1] + Array("mdat".utf8) + [0, 0, 0, 0, 0, 0, 0, UInt8(16 + payload.count)]
        let rewritten = Array(file.bytes[0..<file.initEnd]) + Array(first[0..<moofSize]) + largeHeader + payload
            + Array(file.bytes[file.firstEnd...])
        let scan = try FMP4.scan(rewritten)
        #expect(scan.fragmentCount == 2 && scan.completeEnd == UInt64(rewritten.count))
        #expect(scan.trackEnds == [1: 18000, 2: 7680])

        var tooSmall = rewritten
        tooSmall[file.initEnd + moofSize + 15] = 8  // largesize below its own header size
        #expect(throws: FMP4Error.self) { try FMP4.scan(tooSmall) }
    }

    @Test func sizeZeroExtendsToTheEndOfTheFile() throws {
        let file = try SmallRecording.make()
        var bytes = file.bytes
        let lastMoof = file.firstEnd
        let mdat = lastMoof + Int(u32(bytes, lastMoof))
        for i in 0..<4 { bytes[mdat + i] = 0 }
        let scan = try FMP4.scan(bytes)
        #expect(scan.fragmentCount == 2 && scan.completeEnd == UInt64(bytes.count))
    }

    @Test func zeroFilledTailIsReportedAndExcluded() throws {
        let file = try SmallRecording.make()
        let scan = try FMP4.scan(file.bytes + [UInt8](repeating: 0, count: 4096))
        #expect(scan.tail == .zeroFill(offset: UInt64(file.bytes.count)))
        #expect(scan.completeEnd == UInt64(file.bytes.count))
        #expect(try !FMP4.scan([UInt8](repeating: 0, count: 100)).hasMovie)
    }

    @Test func aMoofWithoutItsMdatIsNotCounted() throws {
        let file = try SmallRecording.make()
        let moofEnd = file.firstEnd + Int(u32(file.bytes, file.firstEnd))
        let scan = try FMP4.scan(Array(file.bytes[0..<moofEnd]))
        #expect(scan.tail == .fragmentWithoutData(offset: UInt64(file.firstEnd)))
        #expect(scan.completeEnd == UInt64(file.firstEnd) && scan.lastSequence == 1)
    }

    @Test func brokenStructureThrowsTypedErrors() throws {
        let file = try SmallRecording.make()
        #expect(throws: FMP4Error.notISOBMFF(found: "o wo")) { try FMP4.scan(Array("hello world, not an mp4".utf8)) }
        // A box header with a size below 8 after the moov.
        #expect(throws: FMP4Error.invalidBoxSize(offset: UInt64(file.bytes.count), size: 3)) {
            try FMP4.scan(file.bytes + [0, 0, 0, 3] + Array("free".utf8))
        }
        // A box type that is not a four-character code.
        #expect(throws: FMP4Error.self) { try FMP4.scan(file.bytes + [0, 0, 0, 8, 1, 2, 3, 4]) }
        // moof before moov.
        let ftyp = Array(file.bytes[0..<Int(u32(file.bytes, 0))])
        let fragment = Array(file.bytes[file.initEnd..<file.firstEnd])
        #expect(throws: FMP4Error.self) { try FMP4.scan(ftyp + fragment) }
        // Two moofs in a row.
        let moof = Array(fragment[0..<Int(u32(fragment, 0))])
        #expect(throws: FMP4Error.self) { try FMP4.scan(file.bytes + moof + moof) }
    }

    @Test func aMovieWithoutMvexIsNotFragmented() throws {
        let bytes = try FMP4.initSegment(tracks: [video]).bytes
        let moov = try #require(boxOffset(bytes, "moov"))
        let mvex = try #require(boxOffset(bytes, "mvex"))
        let mvexSize = Int(u32(bytes, mvex))
        var stripped = Array(bytes[0..<mvex]) + Array(bytes[(mvex + mvexSize)...])
        let moovSize = u32(bytes, moov) - UInt32(mvexSize)
        for i in 0..<4 { stripped[moov + i] = UInt8(truncatingIfNeeded: moovSize >> UInt32(24 - 8 * i)) }
        #expect(throws: FMP4Error.notFragmented) { try FMP4.scan(stripped) }
    }

    @Test func aHugeMoovIsRefusedWithoutReadingIt() throws {
        let ftyp: [UInt8] = [0, 0, 0, 16] + Array("ftypiso6".utf8) + [0, 0, 0, 0]
        let header: [UInt8] = [0, 0, 0, 1] + Array("moov".utf8) + [0, 0, 0, 0x10, 0, 0, 0, 0]  // 64 GiB
        let head = ftyp + header
        let length = UInt64(ftyp.count) + (1 << 36)
        var largestRead = 0
        let result = Result { () throws(FMP4Error) in
            try FMP4.scan(length: length) { offset, count in
                largestRead = max(largestRead, count)
                return (0..<count).map { i in
                    let at = Int(offset) + i
                    return at < head.count ? head[at] : 0
                }
            }
        }
        #expect(throws: FMP4Error.boxTooLarge(type: "moov", offset: 16, size: 1 << 36)) { try result.get() }
        #expect(largestRead <= 16)
    }

    @Test func deeplyNestedJunkIsRejectedWithoutRecursion() throws {
        let ftyp: [UInt8] = [0, 0, 0, 16] + Array("ftypiso6".utf8) + [0, 0, 0, 0]
        var nested: [UInt8] = []
        for _ in 0..<5000 {
            let size = UInt32(nested.count + 8)
            nested = [UInt8(size >> 24), UInt8((size >> 16) & 0xFF), UInt8((size >> 8) & 0xFF), UInt8(size & 0xFF)]
                + Array("trak".utf8) + nested
        }
        let size = UInt32(nested.count + 8)
        let moov = [UInt8(size >> 24), UInt8((size >> 16) & 0xFF), UInt8((size >> 8) & 0xFF), UInt8(size & 0xFF)]
            + Array("moov".utf8) + nested
        #expect(throws: FMP4Error.self) { try FMP4.scan(ftyp + moov) }
    }

    /// A trun without per-sample durations uses tfhd's default, else trex's.
    @Test func honoursDefaultSampleDurations() throws {
        var initBytes = try FMP4.initSegment(tracks: [video, audio]).bytes
        let trex = try #require(boxOffset(initBytes, "trex"))  // track 1's trex
        #expect(u32(initBytes, trex + 12) == 1)
        initBytes[trex + 23] = 100  // default_sample_duration = 100
        var w = ByteWriter()
        w.box("moof") { w in
            w.fullBox("mfhd", version: 0, flags: 0) { w in w.u32(9) }
            w.box("traf") { w in
                w.fullBox("tfhd", version: 0, flags: 0x02_0000) { w in w.u32(1) }
                w.fullBox("tfdt", version: 1, flags: 0) { w in w.u64(1000) }
                w.fullBox("trun", version: 0, flags: 0x201) { w in  // data offset + sizes only
                    w.u32(3); w.u32(0); w.u32(1); w.u32(1); w.u32(1)
                }
            }
            w.box("traf") { w in
                w.fullBox("tfhd", version: 0, flags: 0x02_0018) { w in w.u32(2); w.u32(512); w.u32(1) }
                w.fullBox("tfdt", version: 0, flags: 0) { w in w.u32(2000) }
                w.fullBox("trun", version: 0, flags: 0x001) { w in w.u32(2); w.u32(0) }
            }
        }
        w.u32(8 + 5)
        w.fourCC("mdat")
        w.append([1, 2, 3, 4, 5])
        let scan = try FMP4.scan(initBytes + w.bytes)
        #expect(scan.trackEnds == [1: 1300, 2: 3024])
        #expect(scan.lastSequence == 9)
    }
}
