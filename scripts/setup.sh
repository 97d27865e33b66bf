#!/usr/bin/env bash
# Installs the Debian packages PCastKit needs, only those that are missing.
# Idempotent and non-interactive: safe to run before every build (make demo / make test do).
set -euo pipefail

packages=(
  pkg-config
  libglib2.0-dev
  libgstreamer1.0-dev
  libgstreamer-plugins-base1.0-dev
  libgstreamer-plugins-bad1.0-dev
  libsrtp2-dev
  # DTLS-SRTP for WebRTC peers (the relay's handshake) and the openssl command the tests use as a peer.
  libssl-dev
  openssl
  # curl: the TLS tests fetch over HTTPS with a private CA, as an operator would.
  curl
  libsqlite3-dev
  gstreamer1.0-tools
  gstreamer1.0-plugins-base
  gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad
  gstreamer1.0-plugins-ugly
  gstreamer1.0-libav
  gstreamer1.0-x
  gstreamer1.0-pulseaudio
  gstreamer1.0-alsa
  pulseaudio
  xvfb
  python3
  python3-pip
  python3-gi
  gir1.2-gstreamer-1.0
  gir1.2-gst-plugins-base-1.0
  gir1.2-gst-rtsp-server-1.0
  # GStreamer's webrtcbin as an independent WebRTC peer (its typelib, and libnice for its ICE).
  gir1.2-gst-plugins-bad-1.0
  gstreamer1.0-nice
  gir1.2-nice-0.1
  # Headless Chromium: the browser the WHIP/WHEP tests publish and view with; certutil puts the
  # HTTPS tests' private CA in its certificate store.
  chromium
  libnss3-tools
  gstreamer1.0-plugins-base-apps
  ffmpeg
  nginx
  libnginx-mod-rtmp
  # The shared store of a cluster of nodes: scripts/postgres.sh starts a throwaway server from it.
  postgresql
  # nft: the cluster tests cut the link between two nodes with packet-filter rules; ip: the
  # partition test puts two nodes in network namespaces of their own and cuts their link.
  nftables
  iproute2
  # patchelf: scripts/make-deb.sh points the packaged binaries' RUNPATH at /usr/lib/pcast.
  patchelf
  # coturn: the TURN server the platform mints time-limited credentials for (tests check an
  # allocation with them through turnutils_uclient).
  coturn
  # conntrack: the NAT tests forget a router's mappings mid-stream (a NAT rebinding).
  conntrack
  # wrk: `pcast-bench hls` loads the HLS parts and playlist with a thousand connections.
  wrk
  # prometheus (and its promtool): the tests check the shipped scrape configuration and rules
  # (promtool) and scrape two nodes with them.
  prometheus
)

# Independent oracles the tests check against (PyPI): phenix-edge-auth for digest tokens, pylibsrtp for
# SRTP, aioice (aiortc's ICE) for STUN connectivity checks, aiortc as a third WebRTC peer.
ensure_python_oracle() {
  command -v python3 >/dev/null 2>&1 || return 0
  python3 -c "import edgeauth, pylibsrtp, aioice, aiortc" 2>/dev/null && return 0
  echo "setup: installing phenix-edge-auth, pylibsrtp, aioice and aiortc (PyPI)" >&2
  python3 -m pip install -q phenix-edge-auth pylibsrtp aioice aiortc 2>/dev/null \
    || python3 -m pip install -q --break-system-packages phenix-edge-auth pylibsrtp aioice aiortc
}

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  ensure_python_oracle
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
ensure_python_oracle
