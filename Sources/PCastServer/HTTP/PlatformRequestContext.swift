import Hummingbird
import NIOCore

/// The request context of the platform's HTTP routes: Hummingbird's basic one plus the peer's
/// address, which tokens bound to a remote address are checked against (WHIP and WHEP check
/// their tokens exactly as signaling does).
struct PlatformRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
