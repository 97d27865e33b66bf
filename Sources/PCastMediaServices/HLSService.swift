import Foundation
import Logging
import PCast
import PCastContracts
import PCastMedia
import PCastRecording
import Synchronization

/// One stream's live HLS presentation: the packager, fed on the recorder's queue as fragments are
/// cut, and the players' requests waiting for a part that has not been cut yet.
final class HLSPresentation: FragmentConsumer, Sendable {
    private struct Waiter {
        let id: UInt64
        let ready: @Sendable (HLSPackager) -> Bool
        let continuation: CheckedContinuation<HLSPackager?, Never>
    }

    private struct State {
        var packager: HLSPackager?
        /// Why there is nothing to serve (the tracks were refused, the subscription failed).
        var failure: String?
        /// No more fragments will come (the recorder finished), with or without a packager.
        var finished = false
        var waiters: [Waiter] = []
        var nextWaiter: UInt64 = 0
    }

    let streamId: String
    let settings: HLSPackager.Settings
    private let state = Mutex(State())
    private let logger: Logger

    init(streamId: String, settings: HLSPackager.Settings, logger: Logger) {
        self.streamId = streamId
        self.settings = settings
        self.logger = logger
    }

    // MARK: FragmentConsumer (the recorder's queue)

    func begin(tracks: [FMP4Track]) -> Bool {
        do throws(FMP4Error) {
            let packager = try HLSPackager(tracks: tracks, settings: settings)
            update { $0.packager = packager }
            return true
        } catch {
            fail("the stream's tracks cannot be packaged: \(error)")
            return false
        }
    }

    func consume(_ fragment: FMP4Fragment) {
        update { state in
            do throws(FMP4Error) {
                try state.packager?.append(fragment)
            } catch {
                logger.notice("a fragment was left out of the HLS presentation: \(error)", metadata: ["pcast.stream": .string(streamId)])
            }
        }
    }

    func end() {
        update { state in
            state.packager?.end()
            state.finished = true
        }
    }

    /// Nothing can be served (the subscription failed): waiting requests are answered.
    func fail(_ reason: String) {
        update { state in
            state.failure = state.failure ?? reason
            state.finished = true
        }
    }

    // MARK: Requests

    var isFinished: Bool { state.withLock { $0.finished } }
    var failure: String? { state.withLock { $0.failure } }

    /// The packager once `ready` holds for it, or what there is after `timeout` (nil: no
    /// packager yet). Returns at once when no more fragments will come.
    func wait(timeout: Duration, until ready: @escaping @Sendable (HLSPackager) -> Bool) async -> HLSPackager? {
        await withCheckedContinuation { (continuation: CheckedContinuation<HLSPackager?, Never>) in
            let waiterId: UInt64? = state.withLock { state in
                if state.finished || state.packager.map(ready) == true {
                    continuation.resume(returning: state.packager)
                    return nil
                }
                state.nextWaiter += 1
                state.waiters.append(Waiter(id: state.nextWaiter, ready: ready, continuation: continuation))
                return state.nextWaiter
            }
            guard let waiterId else { return }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                self?.expire(waiterId)
            }
        }
    }

    private func expire(_ id: UInt64) {
        let expired: (Waiter, HLSPackager?)? = state.withLock { state in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return (state.waiters.remove(at: index), state.packager)
        }
        if let (waiter, packager) = expired { waiter.continuation.resume(returning: packager) }
    }

    /// Applies `change`, then answers the waiters it satisfied (outside the lock).
    private func update(_ change: (inout State) -> Void) {
        let (answered, packager): ([Waiter], HLSPackager?) = state.withLock { state in
            change(&state)
            let packager = state.packager
            var answered: [Waiter] = []
            state.waiters.removeAll { waiter in
                guard state.finished || packager.map(waiter.ready) == true else { return false }
                answered.append(waiter)
                return true
            }
            return (answered, packager)
        }
        for waiter in answered { waiter.continuation.resume(returning: packager) }
    }
}

/// The platform's live HLS: a stream published with the `streaming` capability, or asked for by a
/// player, is subscribed to by the platform's own session (best layer, depayloaded, not decoded)
/// and packaged in memory into low-latency HLS (fMP4 parts of at most half a second, segments of
/// about two seconds cut at keyframes, a window of six segments; see ``HLSPackager``). An ended
/// stream keeps its finished playlist (`EXT-X-ENDLIST`) for ``retention`` so players see the end.
///
/// Requests wait rather than poll: a blocking playlist reload until the part it names is cut, a
/// request for the next part (the preload hint) until it is there, the first request of a stream
/// until it has two segments (see ``HLSPackager/isPlayable``). Each wait is bounded (three target durations; ``startTimeout`` for the
/// first segments) and then answered `unavailable`.
actor HLSService: HLSControl {
    struct Entry {
        let presentation: HLSPresentation
        var recording: StreamRecording?
    }

    let settings: HLSPackager.Settings
    /// Presentations packaged at once on this node; a request for one more is refused.
    let maximumPresentations: Int
    /// How long an ended presentation stays served.
    let retention: Duration
    /// How long the first request of a stream waits for it to be playable.
    let startTimeout: Duration
    private let session: InternalSession
    private let logger: Logger
    private var entries: [String: Entry] = [:]
    private var closing = false

    init(session: InternalSession, logger: Logger, settings: HLSPackager.Settings = .init(), maximumPresentations: Int = 64,
         retention: Duration = .seconds(30), startTimeout: Duration = .seconds(10)) {
        self.session = session
        self.logger = logger
        self.settings = settings
        self.maximumPresentations = maximumPresentations
        self.retention = retention
        self.startTimeout = startTimeout
    }

    /// The longest a request waits for a part: three target durations.
    var partTimeout: Duration { .seconds(3 * settings.targetDuration) }

    func start(streamId: String) async {
        _ = presentation(for: streamId)
    }

    /// The stream's presentation, started when there is none; nil when this node packages its
    /// maximum already.
    private func presentation(for streamId: String) -> HLSPresentation? {
        if let entry = entries[streamId] { return entry.presentation }
        guard !closing, entries.count < maximumPresentations else { return nil }
        let presentation = HLSPresentation(streamId: streamId, settings: settings, logger: logger)
        entries[streamId] = Entry(presentation: presentation)
        Task { await self.subscribe(presentation) }
        return presentation
    }

    private func subscribe(_ presentation: HLSPresentation) async {
        let streamId = presentation.streamId
        let recording: StreamRecording
        do throws(PCastError) {
            let client = try await session.client()
            let token = try await session.streamToken(for: streamId)
            recording = try await client.package(streamToken: token, into: presentation, fragmentDuration: settings.partCut)
        } catch {
            logger.notice("HLS packaging did not start", metadata: ["pcast.stream": .string(streamId), "pcast.error": .string(error.description)])
            presentation.fail("stream '\(streamId)' is not live")
            retire(streamId, presentation)
            return
        }
        guard !closing, entries[streamId]?.presentation === presentation else {
            _ = await recording.stop()
            return
        }
        entries[streamId]?.recording = recording
        logger.info("HLS packaging", metadata: ["pcast.stream": .string(streamId)])
        Task {
            let summary = await recording.ended()
            self.logger.info("HLS packaging ended", metadata: ["pcast.stream": .string(streamId), "pcast.duration": "\(summary.duration)",
                                                               "pcast.parts": "\(summary.fragments)"])
            self.retire(streamId, presentation)
        }
    }

    /// Forgets an ended presentation after the retention (a failed one at once).
    private func retire(_ streamId: String, _ presentation: HLSPresentation) {
        let delay = presentation.failure == nil ? retention : .zero
        Task {
            try? await Task.sleep(for: delay)
            self.forget(streamId, presentation)
        }
    }

    private func forget(_ streamId: String, _ presentation: HLSPresentation) {
        if entries[streamId]?.presentation === presentation { entries[streamId] = nil }
    }

    func serve(streamId: String, file: String, reload: HLSReload?, uriQuery: String?, startIfNeeded: Bool) async -> HLSReply {
        let isPlaylist = file == "index.m3u8", isMultivariant = file == "main.m3u8"
        guard isPlaylist || isMultivariant || HLSPackager.Resource(name: file) != nil else {
            return .notFound("'\(file)' is not part of an HLS presentation (main.m3u8, index.m3u8, init.mp4, seg<N>.m4s, part<N>.<I>.m4s)")
        }
        guard startIfNeeded || entries[streamId] != nil else { return .notFound("stream '\(streamId)' has ended") }
        guard let presentation = presentation(for: streamId) else {
            return .unavailable("this node packages its limit of \(maximumPresentations) HLS presentations")
        }
        // A stream just started takes two segments (about four seconds) to be playable.
        guard let packager = await presentation.wait(timeout: startTimeout, until: { $0.isPlayable }), packager.isPlayable || packager.ended else {
            if let failure = presentation.failure { return .notFound(failure) }
            return .unavailable("stream '\(streamId)' has produced nothing to play yet")
        }
        if isMultivariant {
            return .ok(contentType: "application/vnd.apple.mpegurl", body: Array(packager.multivariantPlaylist(uriQuery: uriQuery).utf8), maxAge: 0)
        }
        if isPlaylist { return await playlist(presentation, packager, reload: reload, uriQuery: uriQuery) }
        guard let resource = HLSPackager.Resource(name: file) else { return .notFound("no '\(file)'") }
        if let bytes = packager.resource(resource) { return Self.media(file, bytes) }
        guard packager.mayCome(resource) else {
            return .notFound("'\(file)' is not in the presentation's window")
        }
        let later = await presentation.wait(timeout: partTimeout) { $0.resource(resource) != nil || !$0.mayCome(resource) }
        if let bytes = later?.resource(resource) { return Self.media(file, bytes) }
        return .unavailable("'\(file)' was not cut within \(partTimeout)")
    }

    private func playlist(_ presentation: HLSPresentation, _ packager: HLSPackager, reload: HLSReload?, uriQuery: String?) async -> HLSReply {
        guard let reload else { return Self.playlist(packager, uriQuery) }
        let position = HLSPackager.Position(sequence: reload.mediaSequence, part: reload.part)
        guard packager.mayWait(for: position) else {
            return .badRequest("_HLS_msn=\(reload.mediaSequence) is more than two segments ahead of the presentation (at \(packager.openSequence))")
        }
        if packager.contains(position) { return Self.playlist(packager, uriQuery) }
        guard let later = await presentation.wait(timeout: partTimeout, until: { $0.contains(position) }), later.contains(position) else {
            return .unavailable("segment \(position) was not cut within \(partTimeout)")
        }
        return Self.playlist(later, uriQuery)
    }

    static func playlist(_ packager: HLSPackager, _ uriQuery: String?) -> HLSReply {
        .ok(contentType: "application/vnd.apple.mpegurl", body: Array(packager.playlist(uriQuery: uriQuery).utf8), maxAge: 0)
    }

    /// Parts and segments never change once cut: a cache may keep them while they can be listed.
    static func media(_ file: String, _ bytes: [UInt8]) -> HLSReply {
        .ok(contentType: file == "init.mp4" ? "video/mp4" : "video/iso.segment", body: bytes, maxAge: 60)
    }

    /// Stops packaging (each playlist ends) before the platform closes.
    func shutdown() async {
        closing = true
        let recordings = entries.values.compactMap(\.recording)
        for recording in recordings { _ = await recording.stop() }
        entries = [:]
    }
}
