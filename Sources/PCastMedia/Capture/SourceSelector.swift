import Foundation

/// The source and format chosen for a video track.
public struct VideoSelection: Sendable, Hashable {
    public var device: SourceDeviceInfo
    public var width: Int
    public var height: Int
    public var frameRate: Double
    /// The device mode captured from (physical cameras); nil when the source scales to any size.
    public var mode: VideoMode?
}

/// The source chosen for an audio track.
public struct AudioSelection: Sendable, Hashable {
    public var device: SourceDeviceInfo
    public var sampleRate: Int
    public var channelCount: Int
    public var echoCancelation: Bool
}

/// Chooses sources for user media: the PCast iOS SDK's constraint semantics, with no I/O.
///
/// Hard constraints (`exact`, `min`, `max`) rule sources and modes out; `ideal` ranks what is
/// left by fitness distance, `|actual - ideal| / max(|actual|, |ideal|)` summed over the
/// constraints (as the W3C media-capture algorithm does). Capabilities Linux devices lack (flash,
/// focus, polar pattern, location, facing) pass as ideal and fail as hard unless the device has them.
/// Without a device-id constraint, physical devices are preferred, then synthetic, then null; the
/// screen and URI sources are used only when asked for by id.
public enum SourceSelector {
    /// Rank of a device type when nothing asks for one.
    static func preference(_ type: SourceDeviceType) -> Int {
        switch type {
        case .physical: return 0
        case .synthetic: return 1
        case .null: return 2
        case .systemOutput: return 3
        case .uri: return 4
        }
    }

    public static func selectVideo(_ options: VideoOptions, among devices: [SourceDeviceInfo], hasElement: (String) -> Bool = { _ in true }) throws(UserMediaError) -> VideoSelection {
        try validate(options.width, .width)
        try validate(options.height, .height)
        try validate(options.frameRate, .frameRate)
        let candidates = try candidates(devices.filter { $0.mediaType == .video }, deviceId: options.deviceId, kind: .video)

        // Devices are ranked by preference (and the facing-mode ideal); ideal size and rate only
        // choose among a device's modes: asking for an ideal 1000 px width keeps the camera.
        var firstFailure: (DeviceCapability, String)?
        var best: (VideoSelection, Double)?
        for (rank, device) in candidates.enumerated() {
            do throws(UserMediaError) {
                try checkDeviceCapabilities(device, options)
                let (selection, _) = try fit(device, options)
                let total = facingDistance(device, options.facingMode) * 1000 + Double(rank)
                if best == nil || total < best!.1 { best = (selection, total) }
            } catch {
                guard error.code == .constraintNotSatisfied, let capability = error.capability else { throw error }
                if firstFailure == nil { firstFailure = (capability, "\(device.id): \(error.detail)") }
            }
        }
        if let best { return best.0 }
        if let firstFailure { throw .constraintNotSatisfied(firstFailure.0, firstFailure.1) }
        throw .noSource(.video)
    }

    public static func selectAudio(_ options: AudioOptions, among devices: [SourceDeviceInfo], hasElement: (String) -> Bool) throws(UserMediaError) -> AudioSelection {
        guard (8_000...192_000).contains(options.sampleRate) else { throw .invalidOptions("sample rate \(options.sampleRate) Hz") }
        guard (1...8).contains(options.channelCount) else { throw .invalidOptions("\(options.channelCount) channels") }
        let candidates = try candidates(devices.filter { $0.mediaType == .audio }, deviceId: options.deviceId, kind: .audio)
        if let pattern = options.polarPattern?.exact, pattern != .automatic {
            throw .constraintNotSatisfied(.polarPattern, "no audio device here reports a polar pattern; '\(pattern.rawValue)' cannot be guaranteed")
        }
        if let location = options.location?.exact, location != .automatic {
            throw .constraintNotSatisfied(.location, "no device here reports its location")
        }
        // Echo cancellation (webrtcdsp, with the renderers' audio as its far-end reference) when
        // the plugin is installed: on, or automatic, turn it on; off, or no constraint, leave it off.
        let installed = hasElement("webrtcdsp") && hasElement("webrtcechoprobe")
        let available = installed && echoCancelationRates.contains(options.sampleRate)
        let echoCancelation: Bool
        switch options.echoCancelationMode?.exact ?? options.echoCancelationMode?.ideal {
        case .on?:
            if options.echoCancelationMode?.exact == .on, !available {
                throw .constraintNotSatisfied(.audioEchoCancelationMode, installed
                    ? "echo cancellation works at 8, 16, 32 or 48 kHz, not \(options.sampleRate) Hz"
                    : "echo cancellation needs webrtcdsp (install gstreamer1.0-plugins-bad)")
            }
            echoCancelation = available
        case .automatic?:
            echoCancelation = available
        case .off?, nil:
            echoCancelation = false
        }
        guard let device = candidates.first else { throw .noSource(.audio) }
        return AudioSelection(device: device, sampleRate: options.sampleRate, channelCount: options.channelCount, echoCancelation: echoCancelation)
    }

    /// The sample rates webrtcdsp processes.
    static let echoCancelationRates: Set<Int> = [8_000, 16_000, 32_000, 48_000]

    /// Devices allowed by the device-id constraint, in preference order.
    static func candidates(_ devices: [SourceDeviceInfo], deviceId: Constraint<String>?, kind: MediaType) throws(UserMediaError) -> [SourceDeviceInfo] {
        if let exact = deviceId?.exact {
            guard let device = devices.first(where: { $0.id == exact }) else { throw .deviceNotFound(exact) }
            return [device]
        }
        let ranked = devices
            .filter { $0.deviceType != .systemOutput && $0.deviceType != .uri }
            .enumerated()
            .sorted { (preference($0.element.deviceType), $0.offset) < (preference($1.element.deviceType), $1.offset) }
            .map(\.element)
        if let ideal = deviceId?.ideal, let device = devices.first(where: { $0.id == ideal }) {
            return [device] + ranked.filter { $0.id != ideal }
        }
        guard !ranked.isEmpty else { throw .noSource(kind) }
        return ranked
    }

    static func validate<V: Comparable>(_ constraint: Constraint<V>?, _ capability: DeviceCapability) throws(UserMediaError) {
        guard let constraint else { return }
        if let min = constraint.min, let max = constraint.max, min > max {
            throw .invalidOptions("\(capability): min \(min) is above max \(max)")
        }
        if let exact = constraint.exact, !constraint.admits(exact) {
            throw .invalidOptions("\(capability): exact \(exact) is outside min/max")
        }
    }

    static func checkDeviceCapabilities(_ device: SourceDeviceInfo, _ options: VideoOptions) throws(UserMediaError) {
        if let facing = options.facingMode?.exact, facing != .automatic, device.facingMode != facing {
            throw .constraintNotSatisfied(.facingMode, "faces \(device.facingMode.rawValue), not \(facing.rawValue)")
        }
        if let flash = options.flashMode?.exact, flash == .alwaysOn, !device.hasFlash {
            throw .constraintNotSatisfied(.flashMode, "has no flash")
        }
        if let focus = options.autoFocus?.exact, focus, !device.hasAutoFocus {
            throw .constraintNotSatisfied(.autoFocus, "has no auto focus")
        }
        if let location = options.location?.exact, location != .automatic {
            throw .constraintNotSatisfied(.location, "does not report where it is mounted")
        }
        if let rotation = options.videoSourceRotationMode?.exact, rotation == .followUiRotation {
            throw .constraintNotSatisfied(.videoSourceRotationMode, "there is no UI rotation to follow on Linux")
        }
    }

    static func facingDistance(_ device: SourceDeviceInfo, _ constraint: Constraint<FacingMode>?) -> Double {
        guard let ideal = constraint?.ideal, ideal != .automatic else { return 0 }
        return device.facingMode == ideal ? 0 : 1
    }

    static func distance(_ actual: Double, _ ideal: Double?) -> Double {
        guard let ideal else { return 0 }
        let scale = Swift.max(abs(actual), abs(ideal))
        return scale == 0 ? 0 : abs(actual - ideal) / scale
    }

    /// The value in `range` meeting `constraint` nearest its target; nil when none does.
    static func choose(_ constraint: Constraint<Int>?, in range: ClosedRange<Int>, fallback: Int) -> Int? {
        var low = range.lowerBound, high = range.upperBound
        if let min = constraint?.min { low = Swift.max(low, min) }
        if let max = constraint?.max { high = Swift.min(high, max) }
        if let exact = constraint?.exact { low = Swift.max(low, exact); high = Swift.min(high, exact) }
        guard low <= high else { return nil }
        let target = constraint?.exact ?? constraint?.ideal ?? fallback
        return Swift.min(Swift.max(target, low), high)
    }

    static func choose(_ constraint: Constraint<Double>?, in ranges: [ClosedRange<Double>], fallback: Double) -> Double? {
        var best: Double?
        let target = constraint?.exact ?? constraint?.ideal ?? fallback
        for range in ranges {
            var low = range.lowerBound, high = range.upperBound
            if let min = constraint?.min { low = Swift.max(low, min) }
            if let max = constraint?.max { high = Swift.min(high, max) }
            if let exact = constraint?.exact {
                // Cameras report 30000/1001 as 29.97: allow a hundredth.
                guard exact >= low - 0.01 && exact <= high + 0.01 else { continue }
                low = exact; high = exact
            }
            guard low <= high else { continue }
            let value = Swift.min(Swift.max(target, low), high)
            if best == nil || abs(value - target) < abs(best! - target) { best = value }
        }
        return best
    }

    /// The best size and rate `device` offers under the constraints, with its fitness distance.
    static func fit(_ device: SourceDeviceInfo, _ options: VideoOptions) throws(UserMediaError) -> (VideoSelection, Double) {
        let modes: [VideoMode?] = device.isScalable ? [nil] : device.videoModes.map { $0 }
        var failure: DeviceCapability = .width
        var best: (VideoSelection, Double)?
        for mode in modes {
            let widths = mode?.width ?? 16...8192
            let heights = mode?.height ?? 16...8192
            let rates = mode?.frameRates ?? [1...120]
            guard let width = choose(options.width, in: widths, fallback: VideoOptions.defaultWidth) else { failure = .width; continue }
            guard let height = choose(options.height, in: heights, fallback: VideoOptions.defaultHeight) else { failure = .height; continue }
            guard let rate = choose(options.frameRate, in: rates, fallback: VideoOptions.defaultFrameRate) else { failure = .frameRate; continue }
            let d = distance(Double(width), options.width?.ideal.map(Double.init))
                + distance(Double(height), options.height?.ideal.map(Double.init))
                + distance(rate, options.frameRate?.ideal)
                // Between equally fit modes prefer the default size, then raw over compressed.
                + (options.width?.ideal == nil && options.height?.ideal == nil ? distance(Double(width * height), Double(VideoOptions.defaultWidth * VideoOptions.defaultHeight)) * 0.001 : 0)
                + (mode?.format == "MJPG" ? 0.0001 : 0)
            let selection = VideoSelection(device: device, width: width, height: height, frameRate: rate, mode: mode)
            if best == nil || d < best!.1 { best = (selection, d) }
        }
        guard let best else {
            let wanted: String
            switch failure {
            case .width: wanted = "width \(describe(options.width))"
            case .height: wanted = "height \(describe(options.height))"
            default: wanted = "frame rate \(describe(options.frameRate))"
            }
            throw .constraintNotSatisfied(failure, "no capture mode offers \(wanted); modes: \(device.videoModes.map(\.description).joined(separator: "; "))")
        }
        return best
    }

    static func describe<V>(_ constraint: Constraint<V>?) -> String {
        guard let constraint else { return "any" }
        var parts: [String] = []
        if let v = constraint.exact { parts.append("exactly \(v)") }
        if let v = constraint.min { parts.append("at least \(v)") }
        if let v = constraint.max { parts.append("at most \(v)") }
        if let v = constraint.ideal { parts.append("ideally \(v)") }
        return parts.joined(separator: ", ")
    }
}
