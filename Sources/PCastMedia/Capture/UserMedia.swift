import Foundation
import GStreamer
import Logging
import PCastProtocol
import Synchronization

/// Local user media: the PCast iOS SDK's `getUserMedia` and source-device enumeration.
///
/// ```swift
/// var options = UserMediaOptions()
/// options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
/// options.video.height = .exact(720)
/// options.audio.enabled = false
/// let userMedia = try await UserMedia.getUserMedia(options)
/// let renderer = userMedia.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true))
/// ```
public enum UserMedia {
    /// The sources of `mediaType` this machine offers (see ``SourceDevices``).
    public static func enumerateSourceDevices(_ mediaType: MediaType) async -> [SourceDeviceInfo] {
        await SourceDevices.enumerate(mediaType)
    }

    /// Opens the sources the options choose and starts capturing. Returns once media flows.
    ///
    /// - Throws: ``UserMediaError``: a hard constraint no source meets (naming the capability), a
    ///   missing device, a device in use (``UserMediaError/status`` is `conflict`), a source that
    ///   fails or produces nothing within 10 s.
    public static func getUserMedia(_ options: UserMediaOptions = UserMediaOptions()) async throws(UserMediaError) -> UserMediaStream {
        guard options.video.enabled || options.audio.enabled else {
            throw .invalidOptions("neither audio nor video is enabled")
        }
        do {
            try GStreamerRuntime.initialize()
            SDKLog.routeGStreamer()
        } catch {
            throw .sourceFailed(error.description)
        }
        let plan = try await CapturePlan.make(options)
        let engine = try CaptureEngine(plan: plan, ends: EndSignal())
        return try await UserMediaStream.start(engine: engine, options: options)
    }

    /// The PCast iOS SDK's callback form: `completion(status, stream)`; the stream is nil unless status is `ok`.
    public static func getUserMedia(_ options: UserMediaOptions, completion: @escaping @Sendable (RequestStatus, UserMediaStream?) -> Void) {
        Task {
            do throws(UserMediaError) {
                completion(.ok, try await getUserMedia(options))
            } catch {
                SDKLog.logger("pcast.user-media").error("getUserMedia failed: \(error)")
                completion(error.status, nil)
            }
        }
    }
}

/// What to capture, resolved against the devices present.
struct CapturePlan: Sendable {
    var video: VideoSelection?
    var audio: AudioSelection?
    /// The kinds whose URI source plays again at its end.
    var looping: Set<MediaType> = []
    /// Tracks whose frames the application pushes.
    var feeds: [MediaType: MediaFeed] = [:]

    static func make(_ options: UserMediaOptions) async throws(UserMediaError) -> CapturePlan {
        var plan = CapturePlan()
        if case .uri? = options.video.source, options.video.enabled, options.video.loop { plan.looping.insert(.video) }
        if case .uri? = options.audio.source, options.audio.enabled, options.audio.loop { plan.looping.insert(.audio) }
        if case .feed(let feed)? = options.video.source, options.video.enabled { plan.feeds[.video] = feed }
        if case .feed(let feed)? = options.audio.source, options.audio.enabled { plan.feeds[.audio] = feed }
        if options.video.enabled {
            plan.video = try await selectVideo(options.video)
        }
        if options.audio.enabled {
            plan.audio = try await selectAudio(options.audio)
        }
        return plan
    }

    static func selectVideo(_ options: VideoOptions) async throws(UserMediaError) -> VideoSelection {
        var devices: [SourceDeviceInfo]
        var constrained = options
        switch options.source {
        case .uri(let uri):
            devices = [SourceDeviceInfo(id: uri, name: uri, mediaType: .video, deviceType: .uri,
                                        sourceDescription: "uridecodebin uri=\(SourceDevices.quoted(uri))\(SourceDevices.downloadForLoop(uri, options.loop)) expose-all-streams=false caps=\"video/x-raw(ANY)\" ! queue max-size-buffers=3")]
            constrained.deviceId = .exact(uri)
        case .pipeline(let description):
            devices = [SourceDeviceInfo(id: "pipeline", name: description, mediaType: .video, deviceType: .uri, sourceDescription: description)]
            constrained.deviceId = .exact("pipeline")
        case .feed(let feed):
            devices = [SourceDeviceInfo(id: feed.appSourceName, name: "frames pushed by the application", mediaType: .video, deviceType: .uri,
                                        sourceDescription: feed.sourceDescription)]
            constrained.deviceId = .exact(feed.appSourceName)
        case .screen(let display):
            guard let name = display ?? ProcessInfo.processInfo.environment["DISPLAY"], !name.isEmpty else {
                throw .deviceNotFound("screen (no X display: name one, or set DISPLAY)")
            }
            guard SourceDevices.isDisplayName(name) else { throw .invalidOptions("'\(name)' is not an X display name ([host]:display[.screen])") }
            guard GStreamerRuntime.hasElement("ximagesrc") else { throw .missingElements("ximagesrc (gstreamer1.0-plugins-good)") }
            let screen = SourceDevices.screen(display: name)
            devices = [screen]
            constrained.deviceId = .exact(screen.id)
        case nil:
            // Only probe the device monitor when a physical device may be wanted.
            devices = SourceDevices.builtIn(.video)
            if let exact = options.deviceId?.exact, devices.contains(where: { $0.id == exact }) {
                break
            }
            devices = await SourceDevices.enumerate(.video)
        }
        return try SourceSelector.selectVideo(constrained, among: devices)
    }

    static func selectAudio(_ options: AudioOptions) async throws(UserMediaError) -> AudioSelection {
        var devices: [SourceDeviceInfo]
        var constrained = options
        switch options.source {
        case .uri(let uri):
            devices = [SourceDeviceInfo(id: uri, name: uri, mediaType: .audio, deviceType: .uri,
                                        sourceDescription: "uridecodebin uri=\(SourceDevices.quoted(uri))\(SourceDevices.downloadForLoop(uri, options.loop)) expose-all-streams=false caps=\"audio/x-raw(ANY)\" ! queue max-size-buffers=8")]
            constrained.deviceId = .exact(uri)
        case .pipeline(let description):
            devices = [SourceDeviceInfo(id: "pipeline", name: description, mediaType: .audio, deviceType: .uri, sourceDescription: description)]
            constrained.deviceId = .exact("pipeline")
        case .feed(let feed):
            devices = [SourceDeviceInfo(id: feed.appSourceName, name: "frames pushed by the application", mediaType: .audio, deviceType: .uri,
                                        sourceDescription: feed.sourceDescription)]
            constrained.deviceId = .exact(feed.appSourceName)
        case .screen:
            throw .invalidOptions("the screen is a video source")
        case nil:
            devices = SourceDevices.builtIn(.audio)
            if let exact = options.deviceId?.exact, devices.contains(where: { $0.id == exact }) {
                break
            }
            devices = await SourceDevices.enumerate(.audio)
        }
        return try SourceSelector.selectAudio(constrained, among: devices, hasElement: GStreamerRuntime.hasElement)
    }
}

/// Physical devices opened by this process: a second open is a conflict, as the PCast iOS SDK says.
enum DevicesInUse {
    private static let ids = Mutex<Set<String>>([])

    static func claim(_ device: SourceDeviceInfo) throws(UserMediaError) {
        guard device.deviceType == .physical else { return }
        let claimed = ids.withLock { $0.insert(device.id).inserted }
        guard claimed else { throw .deviceBusy(device.id) }
    }

    static func release(_ device: SourceDeviceInfo?) {
        guard let device, device.deviceType == .physical else { return }
        _ = ids.withLock { $0.remove(device.id) }
    }
}

extension UserMediaError {
    /// Maps a GStreamer failure of a source to the user-media error it means.
    static func from(_ error: StreamError?, device: SourceDeviceInfo?) -> UserMediaError {
        guard let error else { return .sourceFailed("the source failed to start") }
        let id = device?.id ?? error.source
        if error.domain == "gst-resource-error-quark" {
            // GstResourceError: NOT_FOUND = 3, BUSY = 4, OPEN_READ = 5, OPEN_READ_WRITE = 7.
            switch error.code {
            case 4: return .deviceBusy(id)
            case 3: return .deviceNotFound(id)
            default: break
            }
            if error.message.localizedCaseInsensitiveContains("busy") { return .deviceBusy(id) }
            if error.message.localizedCaseInsensitiveContains("does not exist") || error.message.localizedCaseInsensitiveContains("not found") {
                return .deviceNotFound(id)
            }
        }
        return .sourceFailed(error.description)
    }

    static func from(_ error: GStreamerError, device: SourceDeviceInfo?) -> UserMediaError {
        switch error {
        case .missingElements(let missing, _):
            return .missingElements(missing.map(\.description).joined(separator: ", "))
        case .elementFactoryMissing(let missing):
            return .missingElements(missing.description)
        case .stateChangeFailed(_, let streamError):
            return from(streamError, device: device)
        case .stream(let streamError):
            return from(streamError, device: device)
        default:
            return .sourceFailed(error.description)
        }
    }
}
