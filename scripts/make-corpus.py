#!/usr/bin/env python3
"""Writes PCastKit's own RTP/RTCP parser corpus (Tests/Corpora): packets built here from the RFCs,
valid ones and hostile ones (truncated, lying lengths and counts, bad versions, padding abuse).
Deterministic: running it again writes the same bytes. The fuzzers grow the corpus further."""
import os, random, struct, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Corpora")
written = []

def put(kind, name, data):
    path = os.path.join(root, kind, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(bytes(data))
    written.append(path)

# --- RTP (RFC 3550 5.1, RFC 8285 header extensions) ---
def rtp(pt=96, seq=1, ts=3000, ssrc=0x1234, marker=False, csrcs=(), ext=None, payload=b"\x01\x02\x03", padding=0, version=2):
    first = (version << 6) | (0x20 if padding else 0) | (0x10 if ext is not None else 0) | len(csrcs)
    out = bytearray([first, (0x80 if marker else 0) | pt]) + struct.pack("!HII", seq, ts, ssrc)
    for c in csrcs: out += struct.pack("!I", c)
    if ext is not None:
        profile, body = ext
        body = body + b"\x00" * (-len(body) % 4)
        out += struct.pack("!HH", profile, len(body) // 4) + body
    out += payload
    if padding: out += b"\x00" * (padding - 1) + bytes([padding])
    return out

def one_byte(elements):
    return (0xBEDE, b"".join(bytes([(i << 4) | (len(d) - 1)]) + d for i, d in elements))

def two_byte(elements):
    return (0x1000, b"".join(bytes([i, len(d)]) + d for i, d in elements))

valid_rtp = {
    "opus-audio": rtp(pt=111, seq=100, ts=48000, ssrc=0xA1, payload=bytes(range(60))),
    "opus-audio-level-ext": rtp(pt=111, ssrc=0xA1, ext=one_byte([(1, b"\x9f")]), payload=bytes(40)),
    "h264-single-nal": rtp(pt=96, ssrc=0xB1, marker=True, payload=b"\x65" + bytes(range(200))),
    "h264-stap-a": rtp(pt=96, ssrc=0xB1, payload=b"\x18" + struct.pack("!H", 5) + b"\x67\x42\xe0\x1f\x00" + struct.pack("!H", 4) + b"\x68\xce\x3c\x80"),
    "h264-fu-a-start": rtp(pt=96, ssrc=0xB1, payload=b"\x7c\x85" + bytes(1000)),
    "h264-fu-a-end": rtp(pt=96, ssrc=0xB1, marker=True, payload=b"\x7c\x45" + bytes(300)),
    "video-transport-cc-ext": rtp(pt=96, ssrc=0xB1, ext=one_byte([(3, b"\x00\x2a"), (4, b"\x01\x02\x03")]), payload=bytes(100)),
    "video-two-byte-ext": rtp(pt=96, ssrc=0xB1, ext=two_byte([(9, b"\x01\x02"), (200, bytes(20))]), payload=bytes(50)),
    "csrcs": rtp(csrcs=(1, 2, 3, 15), payload=bytes(10)),
    "fifteen-csrcs": rtp(csrcs=tuple(range(15)), payload=bytes(4)),
    "padding": rtp(padding=4, payload=bytes(12)),
    "padding-only-byte": rtp(padding=1, payload=bytes(8)),
    "empty-payload": rtp(payload=b""),
    "marker-seq-wrap": rtp(seq=0xFFFF, ts=0xFFFFFFFF, marker=True),
    "rtx-payload": rtp(pt=97, ssrc=0xC1, payload=struct.pack("!H", 4242) + bytes(500)),
    "red-fec": rtp(pt=63, ssrc=0xA1, payload=b"\x6f\x00\x00\x00" + bytes(30)),
    "dtmf-event": rtp(pt=101, ssrc=0xA1, marker=True, payload=b"\x05\x0a\x00\xa0"),
    "g711-pcmu": rtp(pt=0, ssrc=0xA2, payload=bytes([0xff]) * 160),
    "vp8-descriptor": rtp(pt=98, ssrc=0xB2, payload=b"\x90\x80\x12\x34" + bytes(300)),
    "mid-rid-ext": rtp(pt=96, ssrc=0xB3, ext=one_byte([(5, b"0"), (6, b"hi")]), payload=bytes(80)),
    "large-1200": rtp(pt=96, ssrc=0xB1, payload=bytes(1188)),
    "ext-zero-length": rtp(ext=(0xBEDE, b""), payload=bytes(4)),
    "ext-padding-bytes": rtp(ext=(0xBEDE, b"\x10\x01\x00\x00\x20\x02\x03"), payload=bytes(4)),
}
for name, data in valid_rtp.items(): put("rtp", name, data)

# Hostile RTP: each must be refused (or accepted) cleanly.
hostile_rtp = {
    "crash-empty": b"",
    "crash-one-byte": b"\x80",
    "crash-header-cut": rtp()[:11],
    "crash-csrc-count-lies": bytes([0x8f]) + rtp()[1:12],
    "crash-ext-length-lies": rtp(ext=(0xBEDE, b"\x10\x01\x00\x00"))[:16] + b"\xff\xff",
    "crash-ext-header-cut": rtp(ext=(0xBEDE, b"\x10\x01\x00\x00"))[:14],
    "crash-padding-larger-than-packet": bytearray(rtp(payload=bytes(3))) + b"\xff",
    "crash-padding-zero": bytearray(rtp(payload=bytes(3))) + b"\x00",
    "crash-version-0": rtp(version=0),
    "crash-version-1": rtp(version=1),
    "crash-version-3": rtp(version=3),
    "crash-one-byte-ext-id15": rtp(ext=(0xBEDE, b"\xf0\x00\x00\x00"), payload=b""),
    "crash-one-byte-ext-len-overrun": rtp(ext=(0xBEDE, b"\x1f\x00\x00\x00"), payload=b""),
    "crash-two-byte-ext-len-overrun": rtp(ext=(0x1000, b"\x01\xff\x00\x00"), payload=b""),
    "timeout-ext-all-padding": rtp(ext=(0xBEDE, bytes(4 * 200)), payload=b""),
    "crash-all-ff": b"\xff" * 64,
    "crash-all-zero": b"\x00" * 64,
}
for name, data in hostile_rtp.items():
    first = bytes(data)
    if name == "crash-padding-larger-than-packet":
        first = bytes([first[0] | 0x20]) + first[1:]
    if name == "crash-padding-zero":
        first = bytes([first[0] | 0x20]) + first[1:]
    put("rtp", name, first)

# --- RTCP (RFC 3550 6.4-6.6, RFC 4585, draft-alvestrand-rmcat-remb, draft-holmer-rmcat-transport-wide-cc) ---
def header(count, pt, body):
    assert len(body) % 4 == 0
    return bytes([0x80 | count, pt]) + struct.pack("!H", len(body) // 4) + body

def unterminated(count, pt, body):
    """A header around `body` padded with non-zero bytes (no terminator hidden in the padding)."""
    body = body + b"\x41" * (-len(body) % 4)
    return bytes([0x80 | count, pt]) + struct.pack("!H", len(body) // 4) + body

def block(ssrc, lost_fraction=0, lost=0, highest=1000, jitter=5, lsr=0, dlsr=0):
    return struct.pack("!IB", ssrc, lost_fraction) + lost.to_bytes(3, "big", signed=True) + struct.pack("!IIII", highest, jitter, lsr, dlsr)

def sr(ssrc, blocks=()):
    return header(len(blocks), 200, struct.pack("!IQII I", ssrc, 0xE0000000_12345678, 90000, 10, 12000)[:24] + b"".join(blocks))

def rr(ssrc, blocks=()):
    return header(len(blocks), 201, struct.pack("!I", ssrc) + b"".join(blocks))

def sdes(chunks):
    body = b""
    for ssrc, items in chunks:
        chunk = struct.pack("!I", ssrc) + b"".join(bytes([t, len(v)]) + v for t, v in items) + b"\x00"
        body += chunk + b"\x00" * (-len(chunk) % 4)
    return header(len(chunks), 202, body)

def bye(ssrcs, reason=b""):
    body = b"".join(struct.pack("!I", s) for s in ssrcs)
    if reason:
        r = bytes([len(reason)]) + reason
        body += r + b"\x00" * (-len(r) % 4)
    return header(len(ssrcs), 203, body)

def app(ssrc, name=b"PCST", data=b"abcd"):
    return header(1, 204, struct.pack("!I", ssrc) + name + data)

def fb(pt, fmt, sender, media, fci=b""):
    return header(fmt, pt, struct.pack("!II", sender, media) + fci)

def nack(sender, media, pairs):
    return fb(205, 1, sender, media, b"".join(struct.pack("!HH", p, m) for p, m in pairs))

def pli(sender, media): return fb(206, 1, sender, media)
def fir(sender, entries): return fb(206, 4, sender, 0, b"".join(struct.pack("!IB3x", s, n) for s, n in entries))

def remb(sender, bitrate, ssrcs):
    exp = 0
    while bitrate >= (1 << 18): bitrate >>= 1; exp += 1
    return fb(206, 15, sender, 0, b"REMB" + bytes([len(ssrcs), (exp << 2) | (bitrate >> 16), (bitrate >> 8) & 0xff, bitrate & 0xff]) + b"".join(struct.pack("!I", s) for s in ssrcs))

def twcc(sender, media):
    # base seq 1, status count 3, reference time 1, fb count 0; one run-length chunk; three deltas.
    fci = struct.pack("!HH", 1, 3) + (1).to_bytes(3, "big") + b"\x00" + struct.pack("!H", 0x2003) + b"\x04\x04\x04" + b"\x00" * 7
    return fb(205, 15, sender, media, fci)

def xr(ssrc): return header(0, 207, struct.pack("!I", ssrc) + b"\x04\x00\x00\x02" + struct.pack("!Q", 0xE0000000_00000001))

valid_rtcp = {
    "sr": sr(0x1111, [block(0x2222)]),
    "sr-sdes": sr(0x1111, [block(0x2222)]) + sdes([(0x1111, [(1, b"publisher@pcast")])]),
    "sr-no-blocks": sr(0x1111),
    "rr": rr(0x3333, [block(0x1111, 12, 40, 70000, 30, 0x12345678, 0x10000)]),
    "rr-empty": rr(0x3333),
    "rr-two-blocks": rr(0x3333, [block(0x1111), block(0x1112, 255, -1)]),
    "rr-sdes-bye": rr(0x3333, [block(0x1111)]) + sdes([(0x3333, [(1, b"viewer")])]) + bye([0x3333], b"gone"),
    "rr-remb": rr(0x3333, [block(0x1111)]) + remb(0x3333, 1_500_000, [0x1111]),
    "remb": remb(0x3333, 2_500_000, [0x1111, 0x1112]),
    "remb-zero": remb(0x3333, 0, [0x1111]),
    "nacks": nack(0x3333, 0x1111, [(100, 0), (200, 0xFFFF), (65535, 1)]),
    "nack-one": nack(0x3333, 0x1111, [(7, 0)]),
    "pli": pli(0x3333, 0x1111),
    "fir": fir(0x3333, [(0x1111, 1), (0x1112, 255)]),
    "twcc-feedback": twcc(0x16CA50CE, 0xAE657257),
    "sdes-six-chunks": sdes([(i + 1, [(1, b"abcdef"[: i + 1])]) for i in range(6)]),
    "sdes-all-item-types": sdes([(9, [(t, b"x" * t) for t in range(1, 9)])]),
    "sdes-empty-item": sdes([(9, [(2, b"")])]),
    "sdes-255": sdes([(9, [(8, b"A" * 255)])]),
    "bye": bye([0x1111]),
    "bye-reason": bye([0x1111, 0x1112], b"stream ended"),
    "app": app(0x1111),
    "xr-rrtr": xr(0x3333),
    "compound-everything": sr(0x1111, [block(0x2222)]) + sdes([(0x1111, [(1, b"c")])]) + nack(0x1111, 0x2222, [(1, 3)]) + pli(0x1111, 0x2222) + remb(0x1111, 800_000, [0x2222]) + bye([0x1111]),
    "padding-last": None,
}
pad = bytearray(rr(0x3333))
pad[0] |= 0x20; pad += b"\x00\x00\x00\x04"; struct.pack_into("!H", pad, 2, 2)
valid_rtcp["padding-last"] = bytes(pad)
for name, data in valid_rtcp.items(): put("rtcp", name, data)

# Hostile RTCP: systematic corruptions of every valid packet (deterministic), plus hand-made ones.
rng = random.Random(0x5EED)
hostile = {
    "crash-empty": b"", "crash-three-bytes": b"\x80\xc9\x00", "crash-length-lies-long": b"\x80\xc9\xff\xff\x00\x00\x00\x01",
    "crash-length-zero-sr": b"\x80\xc8\x00\x00", "crash-count-31-rr": b"\x9f\xc9\x00\x01\x00\x00\x00\x01",
    "crash-sdes-no-terminator": unterminated(1, 202, struct.pack("!I", 1) + b"\x01\x08abcdefgh"),
    "crash-sdes-item-overrun": header(1, 202, struct.pack("!I", 1) + b"\x01\xff\x00\x00"),
    "crash-bye-reason-overrun": header(1, 203, struct.pack("!I", 1) + b"\xff\x00\x00\x00"),
    "crash-remb-count-lies": fb(206, 15, 1, 0, b"REMB\xff\x00\x10\x00"),
    "crash-nack-odd-fci": unterminated(1, 205, struct.pack("!II", 1, 2) + b"\x00\x01"),
    "crash-fb-too-short": header(1, 205, struct.pack("!I", 1)),
    "crash-padding-zero": bytes([0xa0, 0xc9, 0x00, 0x01]) + b"\x00\x00\x00\x00",
    "crash-padding-exceeds": bytes([0xa0, 0xc9, 0x00, 0x01]) + b"\x00\x00\x00\xff",
    "crash-version-0": bytes([0x00]) + rr(1)[1:], "crash-version-3": bytes([0xc0]) + rr(1)[1:],
    "timeout-many-empty-rr": rr(1) * 2000,
    "timeout-sdes-many-chunks": header(31, 202, b"".join(struct.pack("!I", i) + b"\x00\x00\x00\x00" for i in range(31))),
    "crash-twcc-chunks-missing": fb(205, 15, 1, 2, struct.pack("!HH", 1, 0xFFFF) + b"\x00\x00\x01\x00"),
}
for name, data in hostile.items(): put("rtcp", name, data)
for name, data in sorted(valid_rtcp.items()):
    data = bytearray(data)
    for i in range(3):
        mutated = bytearray(data)
        for _ in range(1 + i):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        put("rtcp", f"crash-mutated-{name}-{i}", mutated)
    put("rtcp", f"crash-truncated-{name}", data[: max(1, len(data) - 3)])

print(f"{len(written)} files in {os.path.normpath(root)}")
