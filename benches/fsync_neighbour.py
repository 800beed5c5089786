#!/usr/bin/env python3
"""A disk-writing neighbour for the load benchmark: what a write-ahead log does to the machine.

Appends WAL-sized frames (a 24-byte header and a 2 KiB page, as SQLite's log with Tollgate's page
size) to a file of its own, wrapping at --size-mib, and flushes it (fdatasync) every --sync-ms from
a second thread, as a checkpointer does. It shares no code and no socket with what is measured:
run it beside `MODE=tail TARGETS=bare benches/load.sh` to see what the host's disk flushes cost a
process that does no I/O at all (benches/README.md, "Disk flushes").

    python3 benches/fsync_neighbour.py --seconds 60 --sync-ms 5 &
    SKIP_BUILD=1 MODE=tail TARGETS=bare ROUNDS=2 bash benches/load.sh

Every 5 s it prints how many frames it wrote (the real rate: it sleeps 1/--rate between frames, so
it writes fewer than --rate a second; ~2 400 at the default on the VMs measured), its own write
latency and the sectors read and written meanwhile on the machine's disks (/proc/diskstats).
"""

import argparse
import os
import tempfile
import threading
import time


def disk_sectors():
    # Whole disks only (those in /sys/block): partitions would count twice.
    disks = {d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "zram"))}
    read = written = 0
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] in disks:
                read, written = read + int(p[5]), written + int(p[9])
    return read, written


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", help="file to write (default: a new one in $TMPDIR, removed at the end)")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--sync-ms", type=float, default=5, help="fdatasync period; 0 = never (the kernel writes back)")
    ap.add_argument("--rate", type=float, default=3200, help="at most this many frames a second (it sleeps 1/RATE after each)")
    ap.add_argument("--size-mib", type=int, default=32)
    a = ap.parse_args()

    path = a.file or os.path.join(tempfile.gettempdir(), f"fsync-neighbour-{os.getpid()}.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    size, frame = a.size_mib << 20, 24 + 2048
    stop = threading.Event()

    def flusher():
        while not stop.wait(a.sync_ms / 1000):
            os.fdatasync(fd)

    if a.sync_ms > 0:
        threading.Thread(target=flusher, daemon=True).start()
    header, page = b"h" * 24, b"p" * 2048
    off, lat, gap = 32, [], 1 / a.rate
    end, report, disk = time.time() + a.seconds, time.time() + 5, disk_sectors()
    try:
        while time.time() < end:
            t = time.perf_counter()
            os.pwrite(fd, header, off)
            os.pwrite(fd, page, off + 24)
            lat.append(time.perf_counter() - t)
            off = 32 if off + 2 * frame > size else off + frame
            time.sleep(gap)
            if time.time() >= report and lat:
                lat.sort()
                now = disk_sectors()
                print(
                    f"frames {len(lat)}  write p50 {lat[len(lat) // 2] * 1e6:.0f} us  p99 {lat[int(len(lat) * 0.99)] * 1e6:.0f} us"
                    f"  max {lat[-1] * 1e3:.2f} ms  disk sectors read {now[0] - disk[0]} written {now[1] - disk[1]}",
                    flush=True,
                )
                lat, disk, report = [], now, time.time() + 5
    finally:
        stop.set()
        os.close(fd)
        if not a.file:
            os.unlink(path)


if __name__ == "__main__":
    main()
