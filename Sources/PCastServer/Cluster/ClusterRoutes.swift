import Foundation
import Hummingbird
import NIOCore

/// The node-to-node routes (see ``ClusterChannel``): only other nodes of the cluster, signing
/// with the shared key, are answered; their answers are sealed.
///
/// - `POST /cluster/edges` `{streamId}`: the calling node pulls the stream (a cascade leg); the
///   answer carries the leg's transport and this node's relay address.
/// - `POST /cluster/edges/release` `{streamId}`: the calling node's last viewer of it left.
/// - `POST /cluster/recordings` `{}`: the recordings this node keeps.
/// - `POST /cluster/streams/limit` `{streamId, bitsPerSecond}`: the lowest video bitrate the
///   calling node's viewers ask of a stream published here (absent: none).
/// - `POST /cluster/streams/end` `{streamId, reason, description}`: ends a stream published
///   here (an operator's end made on another node).
struct ClusterRoutes: Sendable {
    let platform: Platform
    let channel: ClusterChannel
    let replays = ReplayWindow()
    static let bodyLimit = 16 * 1024

    func register(on router: Router<PlatformRequestContext>) {
        let platform = self.platform
        router.post("/cluster/edges") { request, context in
            try await answer(request, context, path: "/cluster/edges") { (node, body: EdgeRequest) in
                await platform.serveEdge(body.streamId, to: node)
            }
        }
        router.post("/cluster/edges/release") { request, context in
            try await answer(request, context, path: "/cluster/edges/release") { (node, body: EdgeRequest) in
                await platform.releaseEdge(body.streamId, of: node)
            }
        }
        router.post("/cluster/recordings") { request, context in
            try await answer(request, context, path: "/cluster/recordings") { (_, _: RecordingsRequest) in
                await .success(RecordingList(recordings: platform.recordings?.list() ?? []))
            }
        }
        router.post("/cluster/streams/limit") { request, context in
            try await answer(request, context, path: "/cluster/streams/limit") { (node, body: ViewerLimitRequest) in
                await platform.edgeViewerLimit(body.streamId, from: node, bitsPerSecond: body.bitsPerSecond)
            }
        }
        router.post("/cluster/streams/end") { request, context in
            try await answer(request, context, path: "/cluster/streams/end") { (node, body: EndRequest) in
                await platform.endLocalStream(body.streamId, reason: body.reason, description: body.description, askedBy: node)
            }
        }
    }

    private func answer<Body: Decodable, Answer: Encodable>(
        _ request: Request, _ context: PlatformRequestContext, path: String,
        _ handler: @Sendable (String, Body) async -> Result<Answer, ClusterRefusal>
    ) async throws -> Response {
        var request = request
        let bytes: ByteBuffer
        do {
            bytes = try await request.collectBody(upTo: Self.bodyLimit)
        } catch {
            return Self.error("body larger than \(Self.bodyLimit) bytes", status: .contentTooLarge)
        }
        let body = Data(bytes.readableBytesView)
        let verified = channel.verify(
            method: "POST", path: path, body: body, node: request.headers[values: .init(ClusterChannel.nodeHeader)!].first,
            time: request.headers[values: .init(ClusterChannel.timeHeader)!].first,
            signature: request.headers[values: .init(ClusterChannel.signatureHeader)!].first, now: Date(), replays: replays)
        let caller: (nodeId: String, signature: Data)
        switch verified {
        case .failure(let error):
            context.logger.notice("node-to-node request refused", metadata: ["pcast.reason": .string(error.description)])
            return Self.error(error.description, status: .unauthorized)
        case .success(let verified): caller = verified
        }
        guard let decoded = try? JSONDecoder().decode(Body.self, from: body) else {
            return Self.error("malformed request body", status: .badRequest)
        }
        switch await handler(caller.nodeId, decoded) {
        case .failure(let refusal):
            return Self.error(refusal.message, status: HTTPResponse.Status(code: refusal.status))
        case .success(let value):
            do {
                let sealed = try channel.seal(try JSONEncoder().encode(value), for: caller.signature)
                var response = Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(bytes: sealed)))
                response.headers[.contentType] = "application/octet-stream"
                return response
            } catch {
                return Self.error("cannot seal the answer", status: .internalServerError)
            }
        }
    }

    private static func error(_ message: String, status: HTTPResponse.Status) -> Response {
        let data = (try? JSONEncoder().encode(["error": message])) ?? Data()
        var response = Response(status: status, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
        response.headers[.contentType] = "application/json"
        return response
    }
}

/// Why a node refused another's request: an HTTP status and a message.
struct ClusterRefusal: Error, Sendable {
    var status: Int
    var message: String
}
