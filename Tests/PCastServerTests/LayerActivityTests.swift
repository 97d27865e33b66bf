import Foundation
import Testing
@testable import PCastServer
import PCastProtocol

@Suite("Simulcast layers nobody watches rest")
struct LayerActivityTests {
    static let layers = [
        SimulcastLayer(rid: "h", width: 1280, height: 720, bitrate: 2_500_000),
        SimulcastLayer(rid: "m", width: 640, height: 360, bitrate: 300_000),
        SimulcastLayer(rid: "l", width: 320, height: 180, bitrate: 150_000),
    ]

    @Test("every layer is encoded at first; one unwatched for the rest time stops, the starting layer never does; one watched again starts at once; ended streams are forgotten")
    func rests() {
        var activity = LayerActivity()
        let t0 = Date(timeIntervalSince1970: 1_000)
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: [], now: t0) == nil, "all of them, as the publisher starts")
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: ["h"], now: t0 + 4) == nil)
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: ["h"], now: t0 + 5) == ["h", "m"], "l unwatched for 5 s")
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: ["h"], now: t0 + 6) == nil, "told once")
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: ["l"], now: t0 + 7) == ["h", "m", "l"], "at once")
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: [], now: t0 + 10.5) == nil, "h was watched 4.5 s ago: still encoded")
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: [], now: t0 + 11) == ["m", "l"])
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: [], now: t0 + 12.5) == ["m"], "nobody watches: the starting layer only")
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: [], now: t0 + 20) == nil)
        activity.keep(only: [])
        #expect(activity.update(streamId: "s", layers: Self.layers, watched: [], now: t0 + 30) == nil, "forgotten: a new stream of that id starts with all")
    }
}
