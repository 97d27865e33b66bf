// Writes a recording slowly so that a test can SIGKILL it mid-way.
// Usage: FMP4CrashWriter <output.mp4> <video-dir> <audio-dir> <create|append> <ms-per-unit>
// <video-dir> holds v-NNNNN.h264 Annex-B access units (25 fps, keyframe every 25),
// <audio-dir> holds a-NNNNN.opus packets (20 ms). Prints "fragment <seq> <fileSize>" after
// each fragment is on disk and "done" at the end.

import PCastRecording
import Foundation
#if canImport(Glibc)
import Glibc
#endif

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

func load(_ directory: String, suffix: String) -> [[UInt8]] {
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasSuffix(suffix) }.sorted()
    return names.compactMap { FileManager.default.contents(atPath: directory + "/" + $0).map { [UInt8]($0) } }
}

let arguments = CommandLine.arguments
guard arguments.count == 6, let delay = UInt32(arguments[5]) else {
    fail("usage: FMP4CrashWriter <output.mp4> <video-dir> <audio-dir> <create|append> <ms-per-unit>")
}
let video = load(arguments[2], suffix: ".h264")
let audio = load(arguments[3], suffix: ".opus")
guard let first = video.first else { fail("no video access units") }
let sets = H264.parameterSets(annexB: first)
guard let sps = sets.sps, let pps = sets.pps else { fail("first access unit has no SPS/PPS") }
let tracks = [
    FMP4Track(id: 1, timescale: 90_000, codec: .h264(width: 320, height: 240, sps: sps, pps: pps)),
    FMP4Track(id: 2, timescale: 48_000, codec: .opus(channels: 2, sampleRate: 48_000, preSkip: 312)),
]

do {
    let file: RecordingFile
    var startOffset: UInt64 = 0
    if arguments[4] == "append" {
        let appended = try RecordingFile.append(path: arguments[1], tracks: tracks)
        file = appended.file
        startOffset = appended.startOffset
    } else {
        file = try RecordingFile.create(path: arguments[1], tracks: tracks)
    }
    var fragmenter = FMP4Fragmenter(tracks: file.tracks, startOffset: startOffset)
    // Called once per access unit, so the process spends its time between writes like a
    // live recorder waiting for the network.
    func emit(_ fragment: FMP4Fragment?) throws(RecordingFileError) {
        if let fragment {
            try file.write(fragment)
            FileHandle.standardOutput.write(Data("fragment \(file.fragmentsWritten) \(file.fileSize)\n".utf8))
        }
        usleep(delay * 1000)
    }
    var audioIndex = 0
    for (index, unit) in video.enumerated() {
        let pts = UInt64(index) * 40_000_000
        while audioIndex < audio.count, UInt64(audioIndex) * 20_000_000 <= pts {
            try emit(fragmenter.push(.init(trackID: 2, pts: UInt64(audioIndex) * 20_000_000,
                                           isKeyframe: true, data: audio[audioIndex])))
            audioIndex += 1
        }
        try emit(fragmenter.push(.init(trackID: 1, pts: pts, dts: pts, isKeyframe: H264.containsIDR(annexB: unit),
                                       data: H264.lengthPrefixed(annexB: unit))))
    }
    try emit(fragmenter.flush())
    try file.close()
    FileHandle.standardOutput.write(Data("done\n".utf8))
} catch {
    fail("error: \(error)")
}
