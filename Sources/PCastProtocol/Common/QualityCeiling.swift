/// The quality capabilities a token may carry (the PCast SDK documents name `hd`, `sd`, …): the largest video a
/// publish token's stream is encoded at, or a stream token's viewer is sent of a simulcast.
///
/// | capability | lines | box |
/// |---|---:|---|
/// | `uld` | 180 | 320×180 |
/// | `vld` | 240 | 426×240 |
/// | `ld` | 360 | 640×360 |
/// | `sd` | 480 | 854×480 |
/// | `hd` | 720 | 1280×720 |
/// | `fhd` | 1080 | 1920×1080 |
/// | `uhd` | 2160 | 3840×2160 |
///
/// ```swift
/// QualityCeiling(capabilities: ["real-time", "sd"])?.box   // 854×480
/// ```
public enum QualityCeiling: String, Sendable, Hashable, CaseIterable, Codable {
    case uld, vld, ld, sd, hd, fhd, uhd

    /// The most lines (the video's height in landscape).
    public var lines: Int {
        switch self {
        case .uld: 180
        case .vld: 240
        case .ld: 360
        case .sd: 480
        case .hd: 720
        case .fhd: 1080
        case .uhd: 2160
        }
    }

    /// The 16:9 box the video fits in (widths rounded to even).
    public var box: ViewSize {
        ViewSize(width: Int((Double(lines) * 16 / 9 / 2).rounded()) * 2, height: lines)
    }

    /// The ceiling a token's capabilities name; nil when none does. Several are refused by the
    /// platform (see ``names(in:)``).
    public init?(capabilities: [String]) {
        guard let name = capabilities.first(where: { QualityCeiling(rawValue: $0) != nil }) else { return nil }
        self.init(rawValue: name)
    }

    /// The quality capabilities among `capabilities`.
    public static func names(in capabilities: [String]) -> [String] {
        capabilities.filter { QualityCeiling(rawValue: $0) != nil }
    }

    /// `width`×`height` scaled (keeping its shape) to fit the box; unchanged when it fits. Sides
    /// are even (what encoders take).
    public func fit(width: Int, height: Int) -> (width: Int, height: Int) {
        let box = self.box
        guard width > box.width || height > box.height, width > 0, height > 0 else { return (width, height) }
        let scale = min(Double(box.width) / Double(width), Double(box.height) / Double(height))
        func even(_ value: Double) -> Int { max(2, Int((value / 2).rounded()) * 2) }
        return (even(Double(width) * scale), even(Double(height) * scale))
    }
}
