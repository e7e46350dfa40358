#!/usr/bin/env python3
"""wd_forge.py -- a stranger at the watchdog's port (tests/e2e/test_watchdog_forged.sh).

  wd_forge.py sniff SECONDS OUT
      record every TCP segment with a payload on the loopback for SECONDS
      (AF_PACKET: needs root; exits 77 without it), one line each:
      "sport dport seq hex-payload"
  wd_forge.py attack PORT CAPTURE CAPTURE_PORT MODE...
      one connection to 127.0.0.1:PORT per MODE, each read the hub's first
      message, sent its bytes, and closed; prints how many connections it made.
      CAPTURE (a sniff file, or -) holds a real rank's bytes sent to
      CAPTURE_PORT (the hub of this run or of another):
        replay        those bytes as they were (a hello and heartbeats)
        replay-ending the captured hello, then a captured heartbeat whose kind
                      says "ending"
        ending        three "ending" messages claiming rank 1, sequence 0, 1, 2
        hello-ending  a hello claiming rank 1, then "ending"
        old           a 224-byte heartbeat of the unauthenticated format
        garbage       5000 random bytes
        silent        nothing
Only the standard library."""
import os
import socket
import struct
import sys
import time

MAGIC = 0x64647764
HELLO, BEAT, BYE, ENDING = 1, 2, 3, 4
TO_HUB = 1


def sniff(seconds, out):
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        s.bind(("lo", 0))
    except (PermissionError, OSError) as e:
        print("wd_forge: cannot sniff the loopback: %s" % e, file=sys.stderr)
        return 77
    s.settimeout(0.2)
    end = time.time() + seconds
    with open(out, "w") as f:
        while time.time() < end:
            try:
                pkt, addr = s.recvfrom(65536)
            except socket.timeout:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue  # the loopback shows each packet twice
            ip = pkt[14:]
            if len(ip) < 20 or ip[9] != 6:
                continue
            ihl = (ip[0] & 15) * 4
            total = struct.unpack("!H", ip[2:4])[0]
            tcp = ip[ihl:total]
            sport, dport, seq = struct.unpack("!HHI", tcp[:8])
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload:
                f.write("%d %d %d %s\n" % (sport, dport, seq, payload.hex()))
                f.flush()
    return 0


def captured(path, port):
    """The bytes of the first connection to `port` in a sniff file, in order."""
    if path == "-":
        return b""
    conns = {}
    with open(path) as f:
        for line in f:
            sport, dport, seq, data = line.split()
            if int(dport) == port:
                conns.setdefault(int(sport), {})[int(seq)] = bytes.fromhex(data)
    if not conns:
        return b""
    segs = next(iter(conns.values()))  # the first connection seen
    return b"".join(segs[k] for k in sorted(segs))


def frame(size, kind, rank, seq, body=b""):
    head = struct.pack("<IiiIQ", MAGIC, kind, rank, TO_HUB, seq)
    return (head + body).ljust(size, b"\0")[:size]


def attack(port, capture, cport, modes):
    cap = captured(capture, cport)
    made = 0
    for mode in modes:
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        made += 1
        c.settimeout(1.0)
        try:
            first = c.recv(4096)  # the hub's challenge: its size is a message's
        except socket.timeout:
            first = b""
        size = len(first) if first else 296
        if mode == "replay":
            if not cap:
                sys.exit("wd_forge: replay: no captured bytes to port %d in %s" % (cport, capture))
            data = cap
        elif mode == "replay-ending":
            if len(cap) < 2 * size:
                sys.exit("wd_forge: replay-ending: the capture holds no heartbeat")
            beat = bytearray(cap[size:2 * size])
            beat[4:8] = struct.pack("<i", ENDING)
            data = cap[:size] + bytes(beat)
        elif mode == "ending":
            data = b"".join(frame(size, ENDING, 1, k) for k in range(3))
        elif mode == "hello-ending":
            data = frame(size, HELLO, 1, 0) + frame(size, ENDING, 1, 1)
        elif mode == "old":
            data = struct.pack("<Iiii", MAGIC, BEAT, 1, 0).ljust(224, b"\0")
        elif mode == "garbage":
            data = os.urandom(5000)
        elif mode == "silent":
            data = b""
        else:
            sys.exit("wd_forge: unknown mode %s" % mode)
        try:
            c.sendall(data)
            time.sleep(0.3)  # the hub reads it before the close
        except OSError:
            pass  # the hub dropped it already
        c.close()
    print(made)
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "sniff":
        return sniff(float(argv[2]), argv[3])
    if len(argv) >= 6 and argv[1] == "attack":
        return attack(int(argv[2]), argv[3], int(argv[4]), argv[5:])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
