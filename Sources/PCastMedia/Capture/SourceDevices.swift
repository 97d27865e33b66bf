import Foundation
import GStreamer

/// A capture mode a video device offers: a size (or range of sizes) at frame rates.
public struct VideoMode: Sendable, Hashable, Codable, CustomStringConvertible {
    public var width: ClosedRange<Int>
    public var height: ClosedRange<Int>
    /// Discrete rates appear as one-value ranges.
    public var frameRates: [ClosedRange<Double>]
    /// The device's format (`YUY2`, `MJPG` for `image/jpeg` …).
    public var format: String

    public init(width: ClosedRange<Int>, height: ClosedRange<Int>, frameRates: [ClosedRange<Double>], format: String) {
        self.width = width
        self.height = height
        self.frameRates = frameRates
        self.format = format
    }

    public var description: String {
        func text(_ r: ClosedRange<Int>) -> String { r.lowerBound == r.upperBound ? "\(r.lowerBound)" : "\(r.lowerBound)-\(r.upperBound)" }
        let rates = frameRates.map { $0.lowerBound == $0.upperBound ? format(rate: $0.lowerBound) : "\(format(rate: $0.lowerBound))-\(format(rate: $0.upperBound))" }
        return "\(format) \(text(width))x\(text(height)) @ \(rates.joined(separator: ","))"
    }

    private func format(rate: Double) -> String {
        rate == rate.rounded() ? String(Int(rate)) : String(format: "%.2f", rate)
    }
}

/// A source of media the machine offers, with the PCast iOS SDK's fields.
public struct SourceDeviceInfo: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// Stable id to pass as the `deviceId` constraint (`/dev/video0`, `pulse:…`, `synthetic-video` …).
    public var id: String
    public var name: String
    public var mediaType: MediaType
    public var deviceType: SourceDeviceType
    public var facingMode: FacingMode
    /// Capture modes of a physical camera. Empty means any size and rate (scaled and rate-converted:
    /// synthetic, null, screen and URI sources).
    public var videoModes: [VideoMode]
    public var hasFlash: Bool
    public var hasAutoFocus: Bool
    /// The gst-launch description of the source element.
    public var sourceDescription: String

    public init(id: String, name: String, mediaType: MediaType, deviceType: SourceDeviceType,
                facingMode: FacingMode = .automatic, videoModes: [VideoMode] = [],
                hasFlash: Bool = false, hasAutoFocus: Bool = false, sourceDescription: String) {
        self.id = id
        self.name = name
        self.mediaType = mediaType
        self.deviceType = deviceType
        self.facingMode = facingMode
        self.videoModes = videoModes
        self.hasFlash = hasFlash
        self.hasAutoFocus = hasAutoFocus
        self.sourceDescription = sourceDescription
    }

    public var description: String { "\(mediaType) \(deviceType) '\(id)' (\(name))" }

    /// Whether the device captures any size (scaled in the pipeline) rather than fixed modes.
    public var isScalable: Bool { videoModes.isEmpty }
}

/// Lists the sources user media can come from.
///
/// Besides what GStreamer's device monitor finds (V4L2 cameras, PulseAudio/PipeWire/ALSA inputs,
/// monitors of sound outputs), the list always has a synthetic source (test pattern, tone) and a
/// null source (black, silence) of each kind, and the screen when an X display is reachable and
/// `ximagesrc` is installed.
///
/// ```swift
/// for device in await SourceDevices.enumerate(.video) { print(device.id, device.deviceType) }
/// ```
public enum SourceDevices {
    public static let syntheticVideoId = "synthetic-video"
    public static let nullVideoId = "null-video"
    public static let syntheticAudioId = "synthetic-audio"
    public static let nullAudioId = "null-audio"

    /// The sources of `mediaType` present now. Probing runs off Swift's cooperative pool.
    public static func enumerate(_ mediaType: MediaType) async -> [SourceDeviceInfo] {
        var result = builtIn(mediaType)
        let monitored = await DeviceMonitor.sources([mediaType == .video ? .video : .audio])
        for device in monitored {
            if let info = info(for: device, mediaType: mediaType) { result.append(info) }
        }
        return result
    }

    /// The sources that always exist, plus the X screen when there is one.
    static func builtIn(_ mediaType: MediaType, environment: [String: String] = ProcessInfo.processInfo.environment) -> [SourceDeviceInfo] {
        switch mediaType {
        case .video:
            var list = [
                SourceDeviceInfo(id: syntheticVideoId, name: "Test pattern", mediaType: .video, deviceType: .synthetic,
                                 sourceDescription: "videotestsrc is-live=true pattern=smpte"),
                SourceDeviceInfo(id: nullVideoId, name: "Black", mediaType: .video, deviceType: .null,
                                 sourceDescription: "videotestsrc is-live=true pattern=black"),
            ]
            if let display = environment["DISPLAY"], isDisplayName(display), GStreamerRuntime.hasElement("ximagesrc") {
                list.append(screen(display: display))
            }
            return list
        case .audio:
            return [
                SourceDeviceInfo(id: syntheticAudioId, name: "Tone 440 Hz", mediaType: .audio, deviceType: .synthetic,
                                 sourceDescription: "audiotestsrc is-live=true wave=sine freq=440 volume=0.3 samplesperbuffer=480"),
                SourceDeviceInfo(id: nullAudioId, name: "Silence", mediaType: .audio, deviceType: .null,
                                 sourceDescription: "audiotestsrc is-live=true wave=silence samplesperbuffer=480"),
            ]
        }
    }

    /// The X screen `display` as a source (system output capture, with the pointer).
    static func screen(display: String) -> SourceDeviceInfo {
        SourceDeviceInfo(id: "screen:\(display)", name: "Screen \(display)", mediaType: .video, deviceType: .systemOutput,
                         sourceDescription: "ximagesrc display-name=\(display) use-damage=false show-pointer=true")
    }

    /// Whether `name` is an X display name (`[host]:display[.screen]`): nothing else may reach
    /// the pipeline description it goes into.
    static func isDisplayName(_ name: String) -> Bool {
        guard let colon = name.lastIndex(of: ":") else { return false }
        let host = name[..<colon], rest = name[name.index(after: colon)...]
        let parts = rest.split(separator: ".", omittingEmptySubsequences: false)
        return host.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
            && (1...2).contains(parts.count) && parts.allSatisfy { !$0.isEmpty && $0.count <= 5 && $0.allSatisfy { $0.isASCII && $0.isNumber } }
    }

    /// Describes a monitored device; nil when its element cannot be made or addressed.
    static func info(for device: Device, mediaType: MediaType) -> SourceDeviceInfo? {
        guard let element = try? device.makeElement(), let factory = element.factoryName else { return nil }
        let address: (property: String, value: String)?
        if element.hasProperty("device"), let value = try? element.property("device", as: String.self), !value.isEmpty {
            address = ("device", value)
        } else if element.hasProperty("path"), let value = try? element.property("path", as: String.self), !value.isEmpty {
            address = ("path", value)
        } else if element.hasProperty("target-object"), let value = try? element.property("target-object", as: String.self), !value.isEmpty {
            address = ("target-object", value)
        } else {
            address = nil
        }
        guard let address else { return nil }
        let isMonitor = device.deviceClass.contains("Monitor") || address.value.hasSuffix(".monitor")
        let id = factory == "v4l2src" ? address.value : "\(factory):\(address.value)"
        let modes = mediaType == .video ? (device.caps.map(videoModes(from:)) ?? []) : []
        return SourceDeviceInfo(
            id: id, name: device.displayName, mediaType: mediaType,
            deviceType: isMonitor ? .systemOutput : .physical,
            videoModes: modes,
            sourceDescription: "\(factory) \(address.property)=\(quoted(address.value))")
    }

    /// ` download=true` for an http(s) URI that loops: a demuxer reading an HTTP stream (qtdemux in
    /// push mode) cannot seek back to the start, so the first pass ended the source; download
    /// buffering keeps the file in a temporary file the demuxer reads as a file, and the segment
    /// seeks that loop it work as on a `file://` URI.
    static func downloadForLoop(_ uri: String, _ loop: Bool) -> String {
        guard loop, let scheme = URL(string: uri)?.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return "" }
        return " download=true"
    }

    static func quoted(_ value: String) -> String {
        "\"" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// The modes in a device's caps (`video/x-raw` and `image/jpeg` structures).
    static func videoModes(from caps: Caps) -> [VideoMode] {
        caps.structures.compactMap { structure in
            guard structure.name == "video/x-raw" || structure.name == "image/jpeg" else { return nil }
            guard let width = intRange(structure["width"]), let height = intRange(structure["height"]) else { return nil }
            let rates = fractionRanges(structure["framerate"])
            let format: String
            if structure.name == "image/jpeg" { format = "MJPG" }
            else if case .string(let name?) = structure["format"] { format = name }
            else { format = "raw" }
            return VideoMode(width: width, height: height, frameRates: rates.isEmpty ? [1...120] : rates, format: format)
        }
    }

    static func intRange(_ value: PropertyValue?) -> ClosedRange<Int>? {
        switch value {
        case .int(let v): return Int(v)...Int(v)
        case .other(_, let text):
            let numbers = text.split(whereSeparator: { !"0123456789".contains($0) }).compactMap { Int($0) }
            guard let low = numbers.min(), let high = numbers.max(), text.contains("[") else { return nil }
            return low...high
        default: return nil
        }
    }

    static func fractionRanges(_ value: PropertyValue?) -> [ClosedRange<Double>] {
        switch value {
        case .fraction(let n, let d) where d != 0:
            let rate = Double(n) / Double(d)
            return [rate...rate]
        case .other(_, let text):
            // "{ (fraction)30/1, (fraction)15/1 }" or "[ 0/1, 2147483647/1 ]"
            let fractions: [Double] = text.split(whereSeparator: { " ,{}[]()".contains($0) }).compactMap { part in
                let pieces = part.split(separator: "/")
                guard pieces.count == 2, let n = Double(pieces[0]), let d = Double(pieces[1]), d != 0 else { return nil }
                return n / d
            }
            guard !fractions.isEmpty else { return [] }
            if text.trimmingCharacters(in: .whitespaces).hasPrefix("["), fractions.count == 2 {
                return [Swift.min(fractions[0], 120)...Swift.min(fractions[1], 120)]
            }
            return fractions.map { $0...$0 }
        default:
            return []
        }
    }
}
