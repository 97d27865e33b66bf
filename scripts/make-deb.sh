#!/usr/bin/env bash
# Builds pcast_<version>_<arch>.deb from binaries already built (this script builds nothing):
#   /usr/bin/pcast, the GStreamer plugin libgstpcast.so, the Swift runtime libraries they link
#   (copied from the toolchain into /usr/lib/pcast, the binaries' RUNPATH pointed there, so no
#   Swift toolchain is needed where it is installed), the systemd unit, /etc/pcast/pcast.json and
#   /etc/default/pcast as conffiles, and maintainer scripts that create the `pcast` user.
#
#   bash scripts/make-deb.sh [--binaries DIR] [--output DIR] [--version X] [--fast]
#     --binaries  where pcast and libgstpcast.so are (default .build/release)
#     --output    where the .deb is written (default .build/deb)
#     --version   Debian version (default: from `git describe --tags --always`)
#     --fast      gzip -1 instead of xz (the tests' throwaway package)
# Needs dpkg-deb, dpkg-query, patchelf, readelf (binutils), ldd (libc-bin). Prints the .deb's path.
# (Pipes read their input to the end: with pipefail, a reader that quits early would fail the
# script through the writer's SIGPIPE.)
set -euo pipefail
trap 'echo "make-deb: failed at line $LINENO" >&2' ERR

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binaries=.build/release
output=.build/deb
version=""

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 64; }
die() { echo "make-deb: $*" >&2; exit 1; }

compression=()
while [ $# -gt 0 ]; do
  case "$1" in
    --binaries) [ $# -ge 2 ] || usage; binaries=$2; shift 2 ;;
    --output) [ $# -ge 2 ] || usage; output=$2; shift 2 ;;
    --version) [ $# -ge 2 ] || usage; version=$2; shift 2 ;;
    # The tests' package: gzip at its fastest level (xz takes most of a minute on the debug binaries).
    --fast) compression=(-Zgzip -z1); shift ;;
    -h|--help) usage ;;
    *) echo "make-deb: unknown argument $1" >&2; usage ;;
  esac
done

for tool in dpkg-deb dpkg-query patchelf readelf ldd; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (patchelf: apt-get install patchelf)"
done

# Relative paths are relative to the repository (as in the Makefile), not to the caller's directory.
case "$binaries" in /*) ;; *) binaries="$repo/$binaries" ;; esac
case "$output" in /*) ;; *) output="$repo/$output" ;; esac
[ -x "$binaries/pcast" ] || die "no executable $binaries/pcast (swift build -c release --product pcast)"
[ -f "$binaries/libgstpcast.so" ] || die "no $binaries/libgstpcast.so (swift build -c release --product gstpcast)"

# A Debian version: upstream versions start with a digit and use [A-Za-z0-9.+~] (no '-': that
# would start a Debian revision). v1.2.3 -> 1.2.3; v1.2.3-4-gabc -> 1.2.3+4.gabc; abc -> 0.0.0+gabc.
if [ -z "$version" ]; then
  if described=$(git -C "$repo" describe --tags 2>/dev/null); then
    described=${described#v}
    if [[ "$described" =~ ^([0-9][A-Za-z0-9.+~]*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
      version="${BASH_REMATCH[1]}+${BASH_REMATCH[2]}.g${BASH_REMATCH[3]}"
    else
      version=$(echo "$described" | tr -c 'A-Za-z0-9.+~\n' '.')
    fi
  fi
  # No tag (or one that is no version): the commit, as git describe --always names it.
  if [[ ! "$version" =~ ^[0-9] ]]; then
    version="0.0.0+g$(git -C "$repo" describe --always 2>/dev/null || echo unknown)"
  fi
fi
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~]*(-[A-Za-z0-9.+~]+)?$ ]] || die "not a Debian version: $version"

arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || echo "make-deb: warning: building for $arch; the plugin path below assumes the build machine's multiarch" >&2
plugins_dir=$(pkg-config --variable=pluginsdir gstreamer-1.0 2>/dev/null || true)
[ -n "$plugins_dir" ] || plugins_dir=/usr/lib/x86_64-linux-gnu/gstreamer-1.0
libdir=/usr/lib/pcast

root=$(mktemp -d "${TMPDIR:-/tmp}/pcast-deb.XXXXXX")
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"   # mktemp made it 0700: it becomes the mode of / in the archive
install -d "$root/DEBIAN" "$root/usr/bin" "$root$plugins_dir" "$root$libdir" \
  "$root/lib/systemd/system" "$root/etc/pcast" "$root/etc/default" "$root/usr/share/doc/pcast"

install -m 0755 "$binaries/pcast" "$root/usr/bin/pcast"
install -m 0644 "$binaries/libgstpcast.so" "$root$plugins_dir/libgstpcast.so"
install -m 0644 "$repo/deploy/systemd/pcast.service" "$root/lib/systemd/system/pcast.service"
# 0640: it will hold the secret (postinst gives group pcast read access).
install -m 0640 "$repo/deploy/pcast.json" "$root/etc/pcast/pcast.json"
install -m 0644 "$repo/deploy/default/pcast" "$root/etc/default/pcast"

# The Swift runtime: every library the binaries resolve from the toolchain (/opt/swift, or any
# .../usr/lib/swift/linux). ldd runs on the copies (the build may change under us), before their
# RUNPATH is rewritten: it still names the toolchain. A library found nowhere stops the build.
is_swift_runtime() { [[ "$1" == /opt/swift/* || "$1" == */usr/lib/swift/linux/* ]]; }
staged_elf=("$root/usr/bin/pcast" "$root$plugins_dir/libgstpcast.so")
declare -A resolved=()   # soname -> path, as ldd resolved it
for binary in "${staged_elf[@]}"; do
  listing=$(ldd "$binary")   # a failing ldd fails the script here (not inside a substitution)
  while read -r name _ path _; do
    [ "$path" = "not" ] && die "$(basename "$binary"): $name not found (ldd)"
    [ -n "$path" ] && resolved[$name]=$path
  done < <(awk '$2 == "=>" { print $1, $2, $3 }' <<< "$listing")
done
[ ${#resolved[@]} -gt 0 ] || die "ldd resolved no library for the binaries"
bundled=()
for name in "${!resolved[@]}"; do
  path=${resolved[$name]}
  if is_swift_runtime "$path"; then
    install -m 0644 "$(readlink -f "$path")" "$root$libdir/$name"
    bundled+=("$name")
  fi
done

# RUNPATH: the binaries look in /usr/lib/pcast only; the runtime libraries find each other
# beside themselves ($ORIGIN, as the toolchain ships them; rewritten only if it says otherwise).
patchelf --set-rpath "$libdir" "$root/usr/bin/pcast"
patchelf --set-rpath "$libdir" "$root$plugins_dir/libgstpcast.so"
for name in "${bundled[@]}"; do
  current=$(patchelf --print-rpath "$root$libdir/$name")
  # shellcheck disable=SC2016 # a literal $ORIGIN
  if [ -n "$current" ] && [ "$current" != '$ORIGIN' ]; then patchelf --set-rpath '$ORIGIN' "$root$libdir/$name"; fi
done

# Depends: the Debian package of every system library an installed ELF file needs directly
# (its DT_NEEDED entries, resolved as ldd resolved them), plus the GStreamer plugins the media
# pipelines load by name at run time (no DT_NEEDED entry names them).
package_of() {
  local path candidate owner
  # Merged /usr: a file may be registered under /lib or /usr/lib, or only behind a symlink.
  for path in "$1" "$(readlink -f "$1")"; do
    for candidate in "$path" "/usr${path#/usr}" "${path#/usr}"; do
      owner=$(dpkg-query -S "$candidate" 2>/dev/null | awk -F: 'NR == 1 { print $1 }') || true
      if [ -n "$owner" ]; then echo "$owner"; return 0; fi
    done
  done
  return 1
}
declare -A depends=()
elf_files=("${staged_elf[@]}")
for name in "${bundled[@]}"; do elf_files+=("$root$libdir/$name"); done
for file in "${elf_files[@]}"; do
  dynamic=$(readelf -d "$file")
  while read -r needed; do
    [ -n "$needed" ] || continue
    [[ " ${bundled[*]} " == *" $needed "* ]] && continue
    path=${resolved[$needed]:-}
    if [ -z "$path" ]; then
      # The dynamic loader itself (ld-linux-x86-64.so.2) has no "=>" line in ldd's output.
      case "$needed" in ld-linux*) path=$(ldd /bin/sh | awk -v n="$needed" 'index($1, n) && !found { print $1; found = 1 }') ;; esac
    fi
    [ -n "$path" ] || die "$file needs $needed, which ldd did not resolve"
    owner=$(package_of "$path") || die "no installed package owns $path (needed by $(basename "$file"))"
    depends[$owner]=1
  done < <(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<< "$dynamic")
done
for extra in gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad \
             gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-nice; do
  depends[$extra]=1
done
depends_line=$(printf '%s\n' "${!depends[@]}" | sort | paste -sd, - | sed 's/,/, /g')

installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: pcast
Version: $version
Architecture: $arch
Maintainer: PCastKit maintainers <pcast@localhost>
Section: net
Priority: optional
Installed-Size: $installed_size
Depends: $depends_line
Description: PCastKit real-time streaming platform node
 pcast serve: WebSocket signaling, tokens, an SRTP relay on one UDP port,
 WebRTC (WHIP/WHEP), RTMP ingest, HLS, /healthz /readyz /metrics. Also the
 pcast command-line client and the GStreamer plugin (pcastsink, pcastsrc).
 The Swift runtime it was built with is bundled in /usr/lib/pcast.
EOF

cat > "$root/DEBIAN/conffiles" <<'EOF'
/etc/pcast/pcast.json
/etc/default/pcast
EOF

cat > "$root/usr/share/doc/pcast/README.Debian" <<'EOF'
pcast for Debian
================

The service is installed but neither enabled nor started: it needs a TLS certificate first.

1. Put the certificate chain and key in /etc/pcast/tls/fullchain.pem and privkey.pem,
   readable by group pcast (chgrp pcast ...; chmod 0640 ...).
2. Review /etc/pcast/pcast.json (a random secret was generated on installation; /metrics
   needs HTTP Basic applicationId:secret there, "protectMetrics": true) and
   /etc/default/pcast (public address, ICE servers, log level).
3. systemctl enable --now pcast; curl https://HOST/healthz
4. After a certificate renewal: systemctl reload pcast (SIGHUP re-reads it).

Data (rooms.sqlite, recordings, HLS) is kept in /var/lib/pcast, also after purging the package.
EOF

# postinst: the user, the data directory, the secret, permissions, systemd's view of the unit.
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/bash
set -euo pipefail
config=/etc/pcast/pcast.json

if [ "${1:-}" = configure ]; then
  # A system user and group of the same name, home the data directory, no login.
  if ! getent passwd pcast >/dev/null; then
    if command -v adduser >/dev/null 2>&1; then
      adduser --system --group --quiet --home /var/lib/pcast --no-create-home \
        --shell /usr/sbin/nologin --gecos "PCastKit platform" pcast
    else
      getent group pcast >/dev/null || groupadd --system pcast
      useradd --system --gid pcast --home-dir /var/lib/pcast --no-create-home \
        --shell /usr/sbin/nologin --comment "PCastKit platform" pcast
    fi
  fi
  install -d -o pcast -g pcast -m 0750 /var/lib/pcast
  # Where the administrator puts the certificate and key (group pcast may read them).
  [ -d /etc/pcast/tls ] || install -d -o root -g pcast -m 0750 /etc/pcast/tls

  if [ -f "$config" ]; then
    # A random secret instead of the shipped placeholder (first installation, or whenever the
    # placeholder is back); an administrator's own secret is never touched.
    if grep -q '"CHANGE-ME"' "$config"; then
      secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
      sed -i "s/\"CHANGE-ME\"/\"$secret\"/" "$config"
    fi
    # Readable by the service, not by everyone: it holds the application secret.
    chown root:pcast "$config"
    chmod 0640 "$config"
  fi

  # Not enabled or started here: the shipped configuration needs a certificate the package cannot
  # provide (README.Debian). An upgrade restarts a service that is running.
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ -n "${2:-}" ]; then systemctl try-restart pcast.service || true; fi
  fi
fi
exit 0
EOF

# prerm: stop the service when the package goes away (an upgrade restarts it in postinst instead).
cat > "$root/DEBIAN/prerm" <<'EOF'
#!/bin/bash
set -euo pipefail
case "${1:-}" in
  remove|deconfigure)
    if [ -d /run/systemd/system ]; then systemctl stop pcast.service || true; fi
    ;;
esac
exit 0
EOF

# postrm: on purge, forget the unit's enablement and remove what postinst made in /etc. The data
# in /var/lib/pcast and the pcast user stay (files may still belong to its uid; Debian convention).
cat > "$root/DEBIAN/postrm" <<'EOF'
#!/bin/bash
set -euo pipefail
case "${1:-}" in
  remove)
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
    ;;
  purge)
    rm -f /etc/systemd/system/multi-user.target.wants/pcast.service
    # The certificate directory goes only when empty: its keys are the administrator's.
    rmdir /etc/pcast/tls 2>/dev/null || true
    rmdir /etc/pcast 2>/dev/null || true
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
    ;;
esac
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$output"
deb="$output/pcast_${version}_${arch}.deb"
dpkg-deb --build --root-owner-group "${compression[@]}" "$root" "$deb" >/dev/null
echo "$deb"
