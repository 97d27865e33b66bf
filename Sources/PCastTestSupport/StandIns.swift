import Foundation
import Synchronization

// Real stand-ins for devices these machines lack, shared by the test targets (this target is not
// a product): a private PulseAudio server with a null sink, and a private X display.
//
// They are started with posix_spawn and reaped with waitpid here, not with Foundation's Process:
// a long-lived Process child (the shared sound server) makes Foundation's child reaping block
// on it, so that waiting for any other Process child then never returns.

/// A child process started with posix_spawn, with an empty signal mask and default signal
/// dispositions (Foundation's `Process` passes on the spawning thread's mask, and a pool thread
/// blocks SIGINT and SIGTERM, which leaves a child that cannot be stopped); output goes to
/// /dev/null. The one child-process helper of the tests and the benchmarks.
public struct ChildProcess: Sendable {
    public let pid: pid_t

    /// Starts `executable`; its standard output goes to `output` (a file path) when given, its
    /// standard error there too with `errorsToOutput`.
    public static func spawn(_ executable: URL, _ arguments: [String], environment: [String: String], output: String? = nil,
                             errorsToOutput: Bool = false) throws -> ChildProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        if errorsToOutput {
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Children must not inherit a blocked SIGTERM from whatever thread spawns them.
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable.path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
        guard status == 0 else { throw StandInFailure(description: "\(executable.lastPathComponent) could not start: errno \(status)") }
        return ChildProcess(pid: pid)
    }

    /// Whether it still runs (reaps it if it has exited).
    public var isRunning: Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == 0
    }

    /// Waits for it to exit; its exit status (-1 if it was killed by a signal).
    public func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    }

    /// Waits up to `limit` for it to exit: its exit status (-1 if it was killed by a signal), or
    /// nil while it still runs.
    public func wait(within limit: Duration) -> Int32? {
        let deadline = ContinuousClock.now + limit
        var status: Int32 = 0
        while ContinuousClock.now < deadline {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid { return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1 }
            if reaped < 0 && errno != EINTR { return nil }
            usleep(10_000)
        }
        return nil
    }

    /// SIGINT, then SIGKILL if it has not exited within `grace`; always reaps it.
    public func interrupt(grace: Duration = .seconds(2)) {
        guard isRunning else { return }
        kill(pid, SIGINT)
        let deadline = ContinuousClock.now + grace
        while ContinuousClock.now < deadline {
            guard isRunning else { return }
            usleep(10_000)
        }
        stop()
    }

    /// Kills and reaps it.
    public func stop() {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
    }
}

// Unchecked: written once, under `sharedServer`'s lock, before the exit handler that reads it is registered.
nonisolated(unsafe) private var sharedProcessID: pid_t = 0
private let sharedServer = Mutex<PulseAudioServer?>(nil)

/// A private PulseAudio server with one null sink (`pcast_null`), on a socket in a temporary directory.
public struct PulseAudioServer: Sendable {
    public let process: ChildProcess
    public let directory: URL
    public var socket: String { directory.appendingPathComponent("pulse.sock").path }

    /// One server for the whole test process, started on first use, with `PULSE_SERVER` pointing
    /// at it (set once, so suites running in parallel never race on the environment), killed when
    /// the process exits.
    public static func shared() throws -> PulseAudioServer {
        try sharedServer.withLock { server in
            if let server { return server }
            let started = try start()
            setenv("PULSE_SERVER", "unix:\(started.socket)", 1)
            sharedProcessID = started.process.pid
            atexit {
                if sharedProcessID > 0 { kill(sharedProcessID, SIGKILL) }
            }
            server = started
            return started
        }
    }

    public static func start() throws -> PulseAudioServer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-pulse-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let socket = directory.appendingPathComponent("pulse.sock").path
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_RUNTIME_DIR"] = directory.path
        environment["HOME"] = directory.path
        let process = try ChildProcess.spawn(try executable("pulseaudio"),
            ["-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm=true",
             "--load=module-native-protocol-unix auth-anonymous=1 socket=\(socket)",
             "--load=module-null-sink sink_name=pcast_null"], environment: environment)
        try waitFor(path: socket, process: process, what: "PulseAudio")
        return PulseAudioServer(process: process, directory: directory)
    }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

public struct StandInFailure: Error, CustomStringConvertible {
    public let description: String
    public init(description: String) { self.description = description }
}

public func executable(_ name: String) throws -> URL {
    for directory in ["/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/sbin"] {
        let url = URL(fileURLWithPath: directory).appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    throw StandInFailure(description: "\(name) is not installed (scripts/setup.sh installs it)")
}

public func waitFor(path: String, process: ChildProcess, what: String) throws {
    for _ in 0..<100 {
        if FileManager.default.fileExists(atPath: path) { return }
        guard process.isRunning else { throw StandInFailure(description: "\(what) exited before it was ready") }
        Thread.sleep(forTimeInterval: 0.05)
    }
    process.stop()
    throw StandInFailure(description: "\(what) did not come up within 5 s")
}

/// A private X display.
public struct XvfbServer: Sendable {
    public let process: ChildProcess
    public let name: String

    public static func start(width: Int, height: Int) throws -> XvfbServer {
        // Pick a display number nobody holds (a stale lock file means it is taken).
        guard let number = (100..<600).shuffled().first(where: { !FileManager.default.fileExists(atPath: "/tmp/.X\($0)-lock") }) else {
            throw StandInFailure(description: "no free X display number")
        }
        let process = try ChildProcess.spawn(try executable("Xvfb"),
            [":\(number)", "-screen", "0", "\(width)x\(height)x24", "-nolisten", "tcp"],
            environment: ProcessInfo.processInfo.environment)
        try waitFor(path: "/tmp/.X11-unix/X\(number)", process: process, what: "Xvfb")
        return XvfbServer(process: process, name: ":\(number)")
    }

    public func stop() { process.stop() }
}

/// A free TCP port on 127.0.0.1 (bound and released; a small race is accepted in tests).
public func freeTCPPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw StandInFailure(description: "socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw StandInFailure(description: "bind() failed") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Waits until something accepts TCP connections on `host` (an IPv4 address):`port`.
public func waitForTCP(host: String = "127.0.0.1", port: Int, process: ChildProcess, what: String, timeout: Double = 15) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(host)
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        close(fd)
        if connected { return }
        guard process.isRunning else { throw StandInFailure(description: "\(what) exited before listening on \(port)") }
        usleep(50_000)
    }
    throw StandInFailure(description: "\(what) did not listen on \(port) within \(timeout) s")
}

/// A static HTTP server on 127.0.0.1 serving `directory`: nginx, because it answers range
/// requests (an mp4 with its index at the end needs them; Python's http.server does not).
public struct StaticHTTPServer: Sendable {
    public let process: ChildProcess
    public let port: Int
    public let directory: URL

    public static func start(directory root: String) throws -> StaticHTTPServer {
        let (process, port, directory) = try startNginx(what: "nginx (http)") { port, directory in
            httpContext(directory, "server { listen 127.0.0.1:\(port); root \(root); }")
        }
        return StaticHTTPServer(process: process, port: port, directory: directory)
    }

    public func url(_ file: String) -> String { "http://127.0.0.1:\(port)/\(file)" }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// nginx in a temporary directory of its own, one worker in the foreground, with the modules
/// loaded and the top-level contexts (`http { … }`, `rtmp { … }`) that `contexts(port,
/// directory)` gives for a free loopback port; it listens there before this returns.
func startNginx(what: String, modules: [String] = [], contexts: (Int, URL) -> String) throws -> (ChildProcess, Int, URL) {
    let nginx = try executable("nginx")
    let port = try freeTCPPort()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-nginx-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let configuration = modules.map { "load_module \($0);\n" }.joined() + """
        daemon off;
        master_process off;
        worker_processes 1;
        pid \(directory.path)/nginx.pid;
        error_log \(directory.path)/error.log warn;
        events { worker_connections 256; }
        \(contexts(port, directory))
        """
    let file = directory.appendingPathComponent("nginx.conf")
    try configuration.write(to: file, atomically: true, encoding: .utf8)
    let process = try ChildProcess.spawn(nginx, ["-p", directory.path, "-c", file.path, "-e", "\(directory.path)/error.log"],
                                         environment: ProcessInfo.processInfo.environment)
    try waitForTCP(port: port, process: process, what: what)
    return (process, port, directory)
}

/// An `http { … }` context around `server` blocks, its temporary files in `directory`.
func httpContext(_ directory: URL, _ server: String) -> String {
    """
    http {
        access_log off;
        client_body_temp_path \(directory.path);
        proxy_temp_path \(directory.path);
        fastcgi_temp_path \(directory.path);
        uwsgi_temp_path \(directory.path);
        scgi_temp_path \(directory.path);
        \(server)
    }
    """
}

/// An operator's CDN in front of the platform, as far as a player can tell: nginx on 127.0.0.1
/// passing `/<prefix>/…` on to `upstream` (`http://127.0.0.1:PORT`) without caching, and logging
/// each request it passed (``requests``).
public struct ReverseProxyHTTPServer: Sendable {
    public let process: ChildProcess
    public let port: Int
    public let directory: URL
    public let prefix: String

    public static func start(upstream: String, prefix: String = "cdn") throws -> ReverseProxyHTTPServer {
        let (process, port, directory) = try startNginx(what: "nginx (reverse proxy)") { port, directory in
            httpContext(directory, """
            log_format paths '$status $request_uri';
            server {
                listen 127.0.0.1:\(port);
                location /\(prefix)/ {
                    access_log \(directory.path)/access.log paths;
                    proxy_http_version 1.1;
                    proxy_buffering off;
                    proxy_read_timeout 30s;
                    proxy_pass \(upstream)/;
                }
            }
            """)
        }
        return ReverseProxyHTTPServer(process: process, port: port, directory: directory, prefix: prefix)
    }

    /// `http://127.0.0.1:PORT/<prefix>`: what the upstream's root is reached as.
    public var base: String { "http://127.0.0.1:\(port)/\(prefix)" }

    /// The requests passed on so far: status and path with query, in order.
    public var requests: [String] {
        let log = (try? String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        return log.split(separator: "\n").map(String.init)
    }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// nginx with the RTMP module on 127.0.0.1, application `live`: what ffmpeg pushes there can be
/// pulled back as `rtmp://127.0.0.1:PORT/live/KEY`.
public struct NginxRTMPServer: Sendable {
    public let process: ChildProcess
    public let port: Int
    public let directory: URL

    public static func start() throws -> NginxRTMPServer {
        let module = ["/usr/lib/nginx/modules/ngx_rtmp_module.so", "/usr/share/nginx/modules/ngx_rtmp_module.so"]
            .first { FileManager.default.fileExists(atPath: $0) }
        guard let module else { throw StandInFailure(description: "the nginx RTMP module is missing (install libnginx-mod-rtmp)") }
        let (process, port, directory) = try startNginx(what: "nginx (rtmp)", modules: [module]) { port, _ in
            "rtmp { server { listen 127.0.0.1:\(port); chunk_size 4096; application live { live on; record off; } } }"
        }
        return NginxRTMPServer(process: process, port: port, directory: directory)
    }

    public func url(_ key: String) -> String { "rtmp://127.0.0.1:\(port)/live/\(key)" }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// An RTSP server serving one mp4 (H.264 or H.265, and AAC) at `rtsp://127.0.0.1:PORT/clip`: GStreamer's own
/// RTSP server library (gst-rtsp-server) driven by a few lines of Python (python3-gi with
/// gir1.2-gst-rtsp-server-1.0), started with the system Python.
public struct RTSPMediaServer: Sendable {
    public let process: ChildProcess
    public let port: Int
    public let directory: URL

    static let script = """
        import sys, gi
        gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0')
        from gi.repository import Gst, GstRtspServer, GLib
        Gst.init(None)
        path, port, codec = sys.argv[1], sys.argv[2], sys.argv[3]
        server = GstRtspServer.RTSPServer()
        server.set_address('127.0.0.1'); server.set_service(port)
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch('( filesrc location="%s" ! qtdemux name=d d.video_0 ! queue ! %sparse config-interval=-1 ! rtp%spay name=pay0 pt=96 config-interval=-1 d.audio_0 ! queue ! aacparse ! rtpmp4gpay name=pay1 pt=97 )' % (path, codec, codec))
        factory.set_shared(True)
        server.get_mount_points().add_factory('/clip', factory)
        if server.attach(None) == 0: sys.exit('could not listen on %s' % port)
        GLib.MainLoop().run()
        """

    /// Serves `file` (an mp4 with H.264 video, or H.265 when `h265`, and AAC audio).
    public static func start(file: String, h265: Bool = false) throws -> RTSPMediaServer {
        let python = URL(fileURLWithPath: "/usr/bin/python3")
        guard FileManager.default.isExecutableFile(atPath: python.path) else {
            throw StandInFailure(description: "/usr/bin/python3 is missing (install python3, python3-gi, gir1.2-gst-rtsp-server-1.0)")
        }
        guard FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/girepository-1.0/GstRtspServer-1.0.typelib")
            || FileManager.default.fileExists(atPath: "/usr/lib/aarch64-linux-gnu/girepository-1.0/GstRtspServer-1.0.typelib") else {
            throw StandInFailure(description: "the GStreamer RTSP server typelib is missing (install gir1.2-gst-rtsp-server-1.0)")
        }
        let port = try freeTCPPort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-rtsp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let scriptFile = directory.appendingPathComponent("rtsp_server.py")
        try script.write(to: scriptFile, atomically: true, encoding: .utf8)
        let process = try ChildProcess.spawn(python, [scriptFile.path, file, String(port), h265 ? "h265" : "h264"], environment: ProcessInfo.processInfo.environment)
        try waitForTCP(port: port, process: process, what: "the RTSP server")
        return RTSPMediaServer(process: process, port: port, directory: directory)
    }

    public var url: String { "rtsp://127.0.0.1:\(port)/clip" }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}


/// coturn's `turnserver` on loopback with time-limited credentials (`use-auth-secret`): the TURN
/// server operators run beside a WebRTC platform. Without TLS here (the allocation is what the
/// tests check); stopped with ``stop()``.
public struct CoturnServer: Sendable {
    public let port: Int
    public let secret: String
    private let process: ChildProcess

    public static func start(secret: String) throws -> CoturnServer {
        let port = try freeTCPPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-coturn-\(UUID().uuidString).log").path
        let process = try ChildProcess.spawn(try executable("turnserver"), [
            "-n", "--use-auth-secret", "--static-auth-secret=\(secret)", "--realm=pcast", "--listening-ip=127.0.0.1",
            "--listening-port=\(port)", "--no-tls", "--no-dtls", "--no-cli", "--allow-loopback-peers", "--log-file=stdout",
        ], environment: ProcessInfo.processInfo.environment, output: log, errorsToOutput: true)
        try waitForTCP(port: port, process: process, what: "turnserver (coturn)")
        return CoturnServer(port: port, secret: secret, process: process)
    }

    /// coturn over TLS only on `address`:`tlsPort` (443 for a network that lets only HTTPS out),
    /// with the certificate `certificate` and key `key` (PEM), relaying from `address`: what a
    /// browser behind the strictest firewall reaches. Its plain TCP/UDP listener is on a free port
    /// of `address` too (coturn always has one).
    public static func startTLS(secret: String, address: String, tlsPort: Int = 443, certificate: String, key: String) throws -> CoturnServer {
        let plain = try freeTCPPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-coturn-\(UUID().uuidString).log").path
        let process = try ChildProcess.spawn(try executable("turnserver"), [
            "-n", "--use-auth-secret", "--static-auth-secret=\(secret)", "--realm=pcast", "--listening-ip=\(address)",
            "--relay-ip=\(address)", "--listening-port=\(plain)", "--tls-listening-port=\(tlsPort)", "--cert=\(certificate)",
            "--pkey=\(key)", "--no-dtls", "--no-cli", "--log-file=stdout", "--no-stun-backward-compatibility",
        ], environment: ProcessInfo.processInfo.environment, output: log, errorsToOutput: true)
        try waitForTCP(host: address, port: tlsPort, process: process, what: "turnserver over TLS (coturn)")
        return CoturnServer(port: tlsPort, secret: secret, process: process)
    }

    /// Whether `turnutils_uclient` completes an allocation (and relays a few messages through it)
    /// with `username` and `password`.
    public func allocates(username: String, password: String) throws -> Bool {
        let process = try ChildProcess.spawn(try executable("turnutils_uclient"), [
            "-y", "-n", "2", "-m", "1", "-l", "100", "-u", username, "-w", password, "-p", "\(port)", "127.0.0.1",
        ], environment: ProcessInfo.processInfo.environment)
        return process.wait(within: .seconds(15)) == 0
    }

    public func stop() { process.stop() }
}
