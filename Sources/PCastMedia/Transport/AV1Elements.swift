import CAV1RTP
import CGStreamer
import GStreamer
import PCastProtocol
import Synchronization

/// The AV1 RTP elements `pcastav1pay` and `pcastav1depay` (C subclasses of GStreamer's RTP base
/// classes in `CAV1RTP`), doing their payload work with ``AV1Payload`` and ``AV1Depacketizer``.
/// Registered for the process once, before the first pipeline that names them is built.
enum AV1Elements {
    private static let registered = Mutex<Bool?>(nil)

    /// Registers both elements once; false when GStreamer would not (then pipelines naming them
    /// fail to build, with GStreamer's "no element" error).
    @discardableResult
    static func register() -> Bool {
        registered.withLock { state in
            if let state { return state }
            let ok = (try? GStreamerRuntime.initialize()) != nil && pcast_av1_elements_register(nil, &functions) != 0
            state = ok
            return ok
        }
    }

    /// The functions the C elements call; a process-lifetime constant.
    /// Unchecked: written once here and never again; C keeps its address and only reads it.
    nonisolated(unsafe) private static var functions = PCastAV1Functions(
        packetize: av1Packetize,
        depacketizer_new: av1DepacketizerNew,
        depacketizer_free: av1DepacketizerFree,
        depacketizer_reset: av1DepacketizerReset,
        depacketize: av1Depacketize)
}

/// One element's reassembler; the C element owns it (made in READY → PAUSED, freed after PAUSED → READY).
private final class DepacketizerBox {
    var depacketizer: AV1Depacketizer
    init(waitsForKeyframe: Bool) { depacketizer = AV1Depacketizer(waitsForKeyframe: waitsForKeyframe) }
}

private func av1Packetize(_ unit: UnsafePointer<guint8>?, _ size: gsize, _ maximumPayload: guint,
                          _ sink: UnsafeMutableRawPointer?, _ emit: PCastAV1EmitPacket?) -> gboolean {
    guard let unit, let emit else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: unit, count: Int(size)))
    guard let packets = try? AV1Payload.packetize(temporalUnit: bytes, maximumPayloadSize: Int(maximumPayload)) else { return 0 }
    for packet in packets {
        packet.payload.withUnsafeBufferPointer { emit(sink, $0.baseAddress, gsize($0.count), packet.marker ? 1 : 0) }
    }
    return 1
}

private func av1DepacketizerNew(_ waitsForKeyframe: gboolean) -> UnsafeMutableRawPointer? {
    Unmanaged.passRetained(DepacketizerBox(waitsForKeyframe: waitsForKeyframe != 0)).toOpaque()
}

private func av1DepacketizerFree(_ state: UnsafeMutableRawPointer?) {
    guard let state else { return }
    Unmanaged<DepacketizerBox>.fromOpaque(state).release()
}

private func av1DepacketizerReset(_ state: UnsafeMutableRawPointer?) {
    guard let state else { return }
    Unmanaged<DepacketizerBox>.fromOpaque(state).takeUnretainedValue().depacketizer.reset()
}

private func av1Depacketize(_ state: UnsafeMutableRawPointer?, _ payload: UnsafePointer<guint8>?, _ size: gsize, _ sequence: guint16,
                            _ timestamp: guint32, _ marker: gboolean, _ sink: UnsafeMutableRawPointer?, _ emit: PCastAV1EmitUnit?) -> gboolean {
    guard let state, let emit else { return 0 }
    let box = Unmanaged<DepacketizerBox>.fromOpaque(state).takeUnretainedValue()
    let bytes = payload.map { Array(UnsafeBufferPointer(start: $0, count: Int(size))) } ?? []
    var lost = false
    for output in box.depacketizer.take(payload: bytes, sequenceNumber: sequence, timestamp: timestamp, marker: marker != 0) {
        switch output {
        case .temporalUnit(let unit, let keyframe):
            unit.withUnsafeBufferPointer { emit(sink, $0.baseAddress, gsize($0.count), keyframe ? 1 : 0) }
        case .dropped:
            lost = true
        }
    }
    return lost ? 1 : 0
}
