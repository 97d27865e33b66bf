import Foundation
import PCastProtocol

/// Which layers of each simulcast stream published on this node its publisher encodes: those some
/// viewer is sent or moves to, the one new viewers start on (a first frame must not wait for an
/// encoder to wake), and any watched within the last `rest` (a viewer moving back and forth must
/// not wake and stop an encoder each time). The rest are not encoded: a stream nobody watches in
/// 720p costs its publisher no 720p encoder.
///
/// ```swift
/// var activity = LayerActivity()
/// if let active = activity.update(streamId: id, layers: layers, watched: relay.watchedLayers(streamId: id) ?? [], now: Date()) {
///     tellThePublisher(active)
/// }
/// ```
struct LayerActivity {
    var rest: TimeInterval = 5
    private var lastWatched: [String: [String: Date]] = [:]
    private var told: [String: Set<String>] = [:]

    /// The layers to encode now, when they differ from what the publisher was last told (all of
    /// them until then). `layers`: the stream's, best first.
    mutating func update(streamId: String, layers: [SimulcastLayer], watched: Set<String>, now: Date) -> Set<String>? {
        guard !layers.isEmpty else { return nil }
        var seen = lastWatched[streamId] ?? Dictionary(uniqueKeysWithValues: layers.map { ($0.rid, now) })
        for rid in watched { seen[rid] = now }
        lastWatched[streamId] = seen
        let start = layers[layers.count / 2].rid
        let active = Set(layers.map(\.rid).filter { rid in
            rid == start || watched.contains(rid) || seen[rid].map { now.timeIntervalSince($0) < rest } ?? false
        })
        guard active != told[streamId, default: Set(layers.map(\.rid))] else { return nil }
        told[streamId] = active
        return active
    }

    /// Forgets ended streams.
    mutating func keep(only streamIds: Set<String>) {
        lastWatched = lastWatched.filter { streamIds.contains($0.key) }
        told = told.filter { streamIds.contains($0.key) }
    }
}
