public import Foundation
import PCastMedia
import PCastProtocol
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// Options of ``PCastExpress`` (the PCast iOS SDK's `PCastExpressOptionsBuilder`).
public struct PCastExpressOptions: Sendable {
    /// The application backend: tokens come from its ``authenticationRoute`` and ``streamRoute``.
    public var backendURI: URL
    /// A JSON object sent (with the request's fields added) on every backend request.
    public var authenticationData: String?
    /// An auth token to use instead of asking the backend (once; later ones come from the backend).
    public var authenticationToken: String?
    /// The platform's signaling URI; when nil, the one the backend's auth route names.
    public var pcastURI: String?
    /// Options for the underlying ``PCast`` (its `uri` is replaced by the resolved platform URI).
    public var pcastOptions: PCastOptions?
    public var authenticationRoute = BackendAPI.authenticationRoute
    public var streamRoute = BackendAPI.streamRoute
    /// Room roles asked of the backend for this client's session.
    public var roles: [MemberRole] = []
    /// Called when authentication fails for good (the backend or platform refuses the client).
    public var unrecoverableErrorCallback: (@Sendable (RequestStatus, String) -> Void)?

    public init(backendURI: URL, authenticationData: String? = nil, authenticationToken: String? = nil, pcastURI: String? = nil,
                roles: [MemberRole] = [], unrecoverableErrorCallback: (@Sendable (RequestStatus, String) -> Void)? = nil) {
        self.backendURI = backendURI
        self.authenticationData = authenticationData
        self.authenticationToken = authenticationToken
        self.pcastURI = pcastURI
        self.roles = roles
        self.unrecoverableErrorCallback = unrecoverableErrorCallback
    }
}

/// An action that may or may not be possible (the PCast iOS SDK's `PhenixOptionalAction`): a monitor's
/// retry. ``perform()`` or ``dismiss()`` decide; releasing it undecided dismisses it.
///
/// ```swift
/// if retry.isPresent { retry.perform() } else { retry.dismiss() }
/// ```
public final class OptionalAction: Sendable {
    /// In a struct: a closure that is itself a `Mutex`'s value gains a reabstraction thunk on every
    /// `withLock` (see `FrameHookCore.callback`).
    private struct Slot: Sendable { var decided: (@Sendable (Bool) -> Void)? }
    private let action: Mutex<Slot>

    /// An action that runs `decided(true)` on perform and `decided(false)` on dismiss (or release).
    init(_ decided: (@Sendable (Bool) -> Void)?) {
        action = Mutex(Slot(decided: decided))
    }

    /// No action possible (a stream that ended normally).
    static var absent: OptionalAction { OptionalAction(nil) }

    public var isPresent: Bool { action.withLock { $0.decided != nil } }

    /// Performs the action.
    ///
    /// - Throws: ``PCastError/invalidRequest(_:)`` when there is none (``isPresent`` is false).
    public func perform() throws(PCastError) {
        guard let action = action.withLock({ slot in defer { slot.decided = nil }; return slot.decided }) else {
            throw .invalidRequest("there is no action to perform")
        }
        action(true)
    }

    /// Gives the action up; can be called any number of times.
    public func dismiss() {
        action.withLock { slot in defer { slot.decided = nil }; return slot.decided }?(false)
    }

    deinit { dismiss() }
}

/// Monitor callbacks for an Express publisher or subscriber (the PCast iOS SDK's `withMonitor`).
///
/// `setupFailed` is called when the stream cannot be set up; performing its retry tries again
/// (the call that was setting up waits for the decision), dismissing it makes the call throw.
/// `streamEnded` is called whenever the stream ends; for a failure its retry sets the stream up
/// again in the same publisher/subscriber, for a normal end there is no retry.
public struct MonitorOptions: Sendable {
    public var setupFailed: (@Sendable (RequestStatus, OptionalAction) -> Void)?
    public var streamEnded: (@Sendable (StreamEndedReason, String?, OptionalAction) -> Void)?

    public init(setupFailed: (@Sendable (RequestStatus, OptionalAction) -> Void)? = nil,
                streamEnded: (@Sendable (StreamEndedReason, String?, OptionalAction) -> Void)? = nil) {
        self.setupFailed = setupFailed
        self.streamEnded = streamEnded
    }
}

/// Options of ``PCastExpress/publish(_:)`` (the PCast iOS SDK's `PublishOptionsBuilder`).
public struct PublishOptions: Sendable {
    /// Constraints for getUserMedia (ignored when ``userMedia`` is given).
    public var mediaConstraints = UserMediaOptions()
    /// Media to publish instead of getting user media.
    public var userMedia: UserMediaStream?
    public var capabilities: [String] = []
    /// Options of a local preview renderer; nil: no preview.
    public var previewRenderer: RendererOptions?
    public var monitor: MonitorOptions?
    public var tags: [String] = []
    /// A publish token to use instead of asking the backend.
    public var streamToken: String?
    public var settings = EncodingSettings()
    /// `name=value` options that set ``settings`` (see the connect options: `bitrate=…`,
    /// `keyframe-interval=…`, `audio-bitrate=…`); anything else is refused.
    public var connectOptions: [String] = []
    public var publishType: PublishType = .live
    public var streamName: String?

    public init(mediaConstraints: UserMediaOptions = UserMediaOptions(), userMedia: UserMediaStream? = nil, capabilities: [String] = [],
                previewRenderer: RendererOptions? = nil, monitor: MonitorOptions? = nil, tags: [String] = [], streamToken: String? = nil) {
        self.mediaConstraints = mediaConstraints
        self.userMedia = userMedia
        self.capabilities = capabilities
        self.previewRenderer = previewRenderer
        self.monitor = monitor
        self.tags = tags
        self.streamToken = streamToken
    }
}

/// Options of ``PCastExpress/publishRemote(_:)`` (the PCast iOS SDK's `PublishRemoteOptionsBuilder`).
public struct PublishRemoteOptions: Sendable, Hashable {
    public var streamURI: String
    public var capabilities: [String] = []
    public var streamToken: String?
    public var connectOptions: [String] = []
    public var tags: [String] = []
    public var maximumFrameRate: Double?
    public var exactFrameRate: Double?
    public var prerollSkipDuration: Duration = .milliseconds(500)

    public init(streamURI: String, capabilities: [String] = [], tags: [String] = []) {
        self.streamURI = streamURI
        self.capabilities = capabilities
        self.tags = tags
    }
}

/// Options of ``PCastExpress/subscribe(_:)`` (the PCast iOS SDK's `SubscribeOptionsBuilder`).
public struct SubscribeOptions: Sendable {
    public var streamId: String
    public var capabilities: [String] = []
    /// A stream token to use instead of asking the backend (a wildcard token from a room stream URI).
    public var streamToken: String?
    /// Options of a renderer to create and start; nil: none (``ExpressSubscriber/createRenderer(_:)`` makes one later).
    public var renderer: RendererOptions?
    public var monitor: MonitorOptions?
    /// The application's tags for this subscription (who watches, from where): kept with it at the
    /// platform and told to the backend with the viewer's notifications.
    public var tags: [String] = []
    public var playoutDelay: Duration?
    /// `name=value` options (`playout-delay=<ms>`, `layer=<adaptive|best|lowest|RID>`); anything
    /// else is refused. ``playoutDelay`` wins over `playout-delay`.
    public var connectOptions: [String] = []

    public init(streamId: String, capabilities: [String] = [], streamToken: String? = nil, renderer: RendererOptions? = nil,
                monitor: MonitorOptions? = nil) {
        self.streamId = streamId
        self.capabilities = capabilities
        self.streamToken = streamToken
        self.renderer = renderer
        self.monitor = monitor
    }
}
