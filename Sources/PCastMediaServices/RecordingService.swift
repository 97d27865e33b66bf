import Foundation
import Logging
import PCast
import PCastContracts
import PCastMedia
import PCastProtocol

/// The platform's recorder: a stream published with type `record` or `append` is recorded, while
/// it lasts, into `<data directory>/recordings/<stream name>.mp4` as fragmented MP4 (see
/// ``MediaRecorder``), by a subscriber on the platform's own session that depayloads without
/// decoding. `record` replaces a recording of that name; `append` continues it after its end, so
/// an interrupted broadcast that publishes again plays back as one.
///
/// One stream records into a name at a time: a new stream for a name that is still being recorded
/// (its publisher came back before the platform noticed it was gone) first finishes the old one.
actor RecordingService: RecordingControl {
    struct Active {
        let streamId: String
        let recording: StreamRecording
    }

    let directory: String
    private let session: InternalSession
    private let logger: Logger
    private var active: [RecordingName: Active] = [:]
    /// Names whose recorder is being started or stopped, with the work to wait for.
    private var busy: [RecordingName: Task<Void, Never>] = [:]

    init(directory: String, session: InternalSession, logger: Logger) {
        self.directory = directory
        self.session = session
        self.logger = logger
    }

    nonisolated func path(of name: RecordingName) -> String {
        (directory as NSString).appendingPathComponent(name.fileName)
    }

    /// Starts recording `streamId` into `name` (the stream name was checked when it was published).
    func start(streamId: String, name rawName: String, type: PublishType) async {
        let name: RecordingName
        do throws(RecordingNameError) { name = try RecordingName(rawName) } catch {
            logger.error("not recording: \(error)", metadata: ["pcast.stream": .string(streamId)])
            return
        }
        let previous = busy[name]
        let work = Task {
            await previous?.value
            await self.replace(name, with: streamId, type: type)
        }
        busy[name] = work
        await work.value
        if busy[name] == work { busy[name] = nil }
    }

    private func replace(_ name: RecordingName, with streamId: String, type: PublishType) async {
        if let old = active.removeValue(forKey: name) {
            logger.info("recording handed over to a new stream", metadata: ["pcast.recording": .string(name.value), "pcast.stream": .string(old.streamId)])
            _ = await old.recording.stop()
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            logger.error("cannot create the recordings directory: \(error)")
            return
        }
        let recording: StreamRecording
        do throws(PCastError) {
            let client = try await session.client()
            let token = try await session.streamToken(for: streamId)
            recording = try await client.record(streamToken: token, to: path(of: name), mode: type == .append ? .append : .record)
        } catch {
            logger.error("recording did not start", metadata: ["pcast.recording": .string(name.value), "pcast.stream": .string(streamId), "pcast.error": .string(error.description)])
            return
        }
        active[name] = Active(streamId: streamId, recording: recording)
        logger.info("recording", metadata: ["pcast.recording": .string(name.value), "pcast.stream": .string(streamId), "pcast.publishType": .string(type.rawValue)])
        Task {
            let summary = await recording.ended()
            self.finished(name, streamId: streamId, summary)
        }
    }

    private func finished(_ name: RecordingName, streamId: String, _ summary: RecordingSummary) {
        if active[name]?.streamId == streamId { active[name] = nil }
        logger.info("recording finished", metadata: [
            "pcast.recording": .string(name.value), "pcast.stream": .string(streamId),
            "pcast.duration": "\(summary.duration)", "pcast.part": "\(summary.partDuration)", "pcast.bytes": "\(summary.bytes)",
        ])
    }

    /// The recordings on disk.
    func list() -> [RecordingInfo] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        let formatter = ISO8601DateFormatter()
        return files.sorted().compactMap { file -> RecordingInfo? in
            guard let name = RecordingName(fileName: file) else { return nil }
            let path = path(of: name)
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return nil }
            let duration = MediaRecorder.duration(ofRecordingAt: path)
            return RecordingInfo(
                name: name.value, bytes: (attributes[.size] as? NSNumber)?.intValue ?? 0,
                durationMilliseconds: duration.map { Int64($0 / .milliseconds(1)) },
                modified: formatter.string(from: (attributes[.modificationDate] as? Date) ?? Date(timeIntervalSince1970: 0)),
                recordingStreamId: active[name]?.streamId)
        }
    }

    /// Finishes every recording (the last fragment is written).
    func shutdown() async {
        for task in busy.values { await task.value }
        for (_, entry) in active { _ = await entry.recording.stop() }
        active = [:]
    }
}
