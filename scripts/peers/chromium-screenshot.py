#!/usr/bin/env python3
"""A screenshot of a running headless Chromium's page, through the DevTools protocol (Python's
standard library only: HTTP for the target list, a minimal WebSocket client for one command).

  chromium-screenshot.py PROFILE_DIRECTORY OUT.png [URL_PREFIX]

Chromium must run with --remote-debugging-port=0 and --user-data-dir=PROFILE_DIRECTORY: it
writes the port it chose to DevToolsActivePort there. The page is the first one whose URL starts
with URL_PREFIX (default: any page). Exit status 0 and OUT.png written, or 1 with the reason.
"""
import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.parse
import urllib.request

profile, out = sys.argv[1], sys.argv[2]
prefix = sys.argv[3] if len(sys.argv) > 3 else ''


def fail(why):
    sys.stderr.write('chromium-screenshot: %s\n' % why)
    sys.exit(1)


deadline = time.time() + 10
port_file = os.path.join(profile, 'DevToolsActivePort')
while not os.path.exists(port_file):
    if time.time() > deadline:
        fail('no DevToolsActivePort in %s (was Chromium started with --remote-debugging-port=0?)' % profile)
    time.sleep(0.1)
port = int(open(port_file).read().split()[0])

targets = json.load(urllib.request.urlopen('http://127.0.0.1:%d/json/list' % port, timeout=5))
pages = [t for t in targets if t.get('type') == 'page' and t.get('url', '').startswith(prefix)]
if not pages:
    fail('no page starting with %r among %r' % (prefix, [t.get('url') for t in targets]))
endpoint = urllib.parse.urlparse(pages[0]['webSocketDebuggerUrl'])

connection = socket.create_connection((endpoint.hostname, endpoint.port), timeout=10)
key = base64.b64encode(os.urandom(16)).decode()
connection.sendall(('GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                    'Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n'
                    % (endpoint.path, endpoint.hostname, endpoint.port, key)).encode())
head = b''
while b'\r\n\r\n' not in head:
    chunk = connection.recv(4096)
    if not chunk:
        fail('DevTools closed the connection during the upgrade')
    head += chunk
if b' 101 ' not in head.split(b'\r\n')[0]:
    fail('DevTools refused the WebSocket: %r' % head.split(b'\r\n')[0])
pending = head.split(b'\r\n\r\n', 1)[1]


def send_text(text):
    payload = text.encode()
    mask = os.urandom(4)
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        header += bytes([0x80 | 126]) + struct.pack('>H', len(payload))
    else:
        header += bytes([0x80 | 127]) + struct.pack('>Q', len(payload))
    connection.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def read_exact(count):
    global pending
    while len(pending) < count:
        chunk = connection.recv(1 << 20)
        if not chunk:
            fail('DevTools closed the connection')
        pending += chunk
    data, pending = pending[:count], pending[count:]
    return data


def read_message():
    message = b''
    while True:
        first, second = read_exact(2)
        length = second & 0x7F
        if length == 126:
            length = struct.unpack('>H', read_exact(2))[0]
        elif length == 127:
            length = struct.unpack('>Q', read_exact(8))[0]
        message += read_exact(length)
        if first & 0x80:
            return message


send_text(json.dumps({'id': 1, 'method': 'Page.captureScreenshot', 'params': {'format': 'png'}}))
while True:
    reply = json.loads(read_message())
    if reply.get('id') == 1:
        break
if 'error' in reply:
    fail('Page.captureScreenshot: %r' % reply['error'])
with open(out, 'wb') as f:
    f.write(base64.b64decode(reply['result']['data']))
connection.close()
