#!/usr/bin/python3
"""The lab's cold snapshots: a FUSE filesystem that serves volume images lazily loaded.

It mirrors every regular file of SOURCE (a flat folder of volume images, hard links of the
lab's images) at MOUNTPOINT, byte for byte, and keeps one bit per CHUNK-BYTES chunk of each
file: cold or warm. The first touch of a cold chunk waits DELAY-MS (the fetch from S3 of an EBS
volume restored from a snapshot), then the chunk is warm and served at the speed of the disk
underneath. A loop device set up on MOUNTPOINT/<file> is then a block device that reads slowly
on the first touch of each block and fast afterwards, as such an EBS volume does.

- Reads: every cold chunk a request touches is fetched once; the chunks of one request are
  fetched in parallel (one delay), requests run in parallel (one thread each), and a chunk
  already being fetched is waited for, not fetched twice.
- Writes: a chunk written whole becomes warm at once; a partial write to a cold chunk fetches
  it first (the rest of the block has to come from the snapshot).
- --holes warm: chunks holding no data in the image (holes of the sparse file, found with
  SEEK_DATA) start warm; the default (cold) treats every chunk of the volume as cold.
- MOUNTPOINT/.cold-status.json (read-only) gives per file: chunks, warm chunks, fetches,
  delayed milliseconds, bytes read and written.
- --fetch-log FILE: one line `<file> <chunk index>` per chunk fetched, in the order fetched (what
  was read first on a cold volume; tests check the pre-warm's order with it).
- MOUNTPOINT/.cold-control (write-only) takes one JSON command per write:
  {"op": "initialize", "file": "<name>", "rateMiBps": N}: warms the file in the background at
  N MiB/s, in chunk order (EBS's provisioned-rate initialization);
  {"op": "cool", "file": "<name>"}: every chunk cold again (tests).

The warm bits live in this process only: a new process starts every file cold. Run as root by
the lab (src/lab/volumes/cold.ts), in the foreground. `fusermount -u` ends it in order; SIGTERM, SIGINT or
SIGHUP end it at once, leaving the (dead) mount for the lab's reaper to find and unmount.
"""

import argparse
import errno
import json
import logging
import os
import signal
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations

STATUS = "/.cold-status.json"
CONTROL = "/.cold-control"


class ChunkState:
    """The cold/warm bits of one file, and what was done to it."""

    def __init__(self, size, chunk, holes_warm, fd, on_fetched=None):
        self.chunk = chunk
        self.on_fetched = on_fetched  # called with the chunk indexes each fetch warmed, in order
        self.count = (size + chunk - 1) // chunk
        self.warm = bytearray(self.count)
        self.fetching = {}  # chunk index -> threading.Event set when its fetch ends
        self.lock = threading.Lock()
        self.fetches = 0
        self.delayed_ms = 0.0
        self.bytes_read = 0
        self.bytes_written = 0
        self.initializer = None
        if holes_warm and fd is not None:
            self._warm_holes(fd, size)

    def _warm_holes(self, fd, size):
        data = bytearray(self.count)  # 1 where the chunk holds data
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            for index in range(start // self.chunk, (end - 1) // self.chunk + 1):
                data[index] = 1
            offset = end
        for index in range(self.count):
            if not data[index]:
                self.warm[index] = 1

    def grow(self, size):
        count = (size + self.chunk - 1) // self.chunk
        with self.lock:
            if count > self.count:
                # Space added to a volume is new: nothing to fetch.
                self.warm.extend(b"\x01" * (count - self.count))
                self.count = count

    def warm_count(self):
        with self.lock:
            return self.count - self.warm.count(0)

    def fetch(self, indexes, delay):
        """Makes the chunks warm, waiting `delay` seconds once for those this call fetches."""
        mine = []
        theirs = []
        with self.lock:
            for index in indexes:
                if index >= self.count or self.warm[index]:
                    continue
                event = self.fetching.get(index)
                if event is None:
                    event = threading.Event()
                    self.fetching[index] = event
                    mine.append((index, event))
                else:
                    theirs.append(event)
        if mine:
            started = time.monotonic()
            time.sleep(delay)
            with self.lock:
                for index, event in mine:
                    self.warm[index] = 1
                    del self.fetching[index]
                    event.set()
                self.fetches += len(mine)
                self.delayed_ms += (time.monotonic() - started) * 1000
            if self.on_fetched is not None:
                self.on_fetched([index for index, _ in mine])
        for event in theirs:
            event.wait()

    def mark_warm(self, indexes):
        with self.lock:
            for index in indexes:
                if index < self.count:
                    self.warm[index] = 1

    def cool(self):
        with self.lock:
            self.warm = bytearray(self.count)

    def status(self):
        with self.lock:
            warm = self.count - self.warm.count(0)
            return {
                "chunks": self.count,
                "warmChunks": warm,
                "fetches": self.fetches,
                "delayedMs": round(self.delayed_ms),
                "bytesRead": self.bytes_read,
                "bytesWritten": self.bytes_written,
                "initializing": self.initializer is not None and self.initializer.is_alive(),
            }


class ColdImages(Operations):
    use_ns = True

    def __init__(self, source, chunk, delay_ms, holes_warm, fetch_log=None):
        self.fetch_log = open(fetch_log, "a", buffering=1) if fetch_log else None
        self.fetch_log_lock = threading.Lock()
        self.source = os.path.realpath(source)
        self.chunk = chunk
        self.delay = delay_ms / 1000.0
        self.holes_warm = holes_warm
        self.states = {}  # (name, inode) -> ChunkState
        self.lock = threading.Lock()

    # -- helpers -------------------------------------------------------------------------

    def _logged(self, name, indexes):
        """Appends `<file> <chunk>` per chunk fetched to --fetch-log (the order of first reads)."""
        if self.fetch_log is None:
            return
        with self.fetch_log_lock:
            self.fetch_log.write("".join(f"{name} {index}\n" for index in indexes))

    def _name(self, path):
        name = path.lstrip("/")
        if not name or "/" in name or name.startswith("."):
            raise FuseOSError(errno.ENOENT)
        return name

    def _real(self, path):
        return os.path.join(self.source, self._name(path))

    def _state(self, name, fd):
        info = os.fstat(fd)
        key = (name, info.st_ino)
        with self.lock:
            state = self.states.get(key)
            if state is None:
                # A file of that name with another inode was deleted and replaced: forget it.
                for other in [k for k in self.states if k[0] == name]:
                    del self.states[other]
                state = ChunkState(
                    info.st_size, self.chunk, self.holes_warm, fd, on_fetched=lambda idx, n=name: self._logged(n, idx)
                )
                self.states[key] = state
            return state

    def _state_by_name(self, name):
        real = os.path.join(self.source, name)
        fd = os.open(real, os.O_RDONLY)
        try:
            return self._state(name, fd)
        finally:
            os.close(fd)

    def _status_bytes(self):
        files = {}
        for name in sorted(os.listdir(self.source)):
            if name.startswith("."):
                continue
            try:
                files[name] = self._state_by_name(name).status()
            except OSError:
                continue
        return (json.dumps({"chunkBytes": self.chunk, "delayMs": self.delay * 1000, "files": files}) + "\n").encode()

    # -- metadata ------------------------------------------------------------------------

    def getattr(self, path, fh=None):
        now = time.time_ns()
        if path == STATUS or path == CONTROL:
            mode = stat.S_IFREG | (0o444 if path == STATUS else 0o200)
            return {"st_mode": mode, "st_nlink": 1, "st_size": 0, "st_uid": 0, "st_gid": 0,
                    "st_atime": now, "st_mtime": now, "st_ctime": now}
        real = self.source if path == "/" else self._real(path)
        try:
            info = os.lstat(real)
        except OSError as error:
            raise FuseOSError(error.errno)
        if path != "/" and not stat.S_ISREG(info.st_mode):
            raise FuseOSError(errno.ENOENT)
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_blocks")
        attrs = {key: getattr(info, key) for key in keys}
        attrs.update(st_atime=info.st_atime_ns, st_mtime=info.st_mtime_ns, st_ctime=info.st_ctime_ns)
        return attrs

    def readdir(self, path, fh):
        if path != "/":
            raise FuseOSError(errno.ENOTDIR)
        names = [n for n in os.listdir(self.source) if not n.startswith(".")]
        return [".", "..", STATUS[1:], CONTROL[1:]] + sorted(names)

    def statfs(self, path):
        info = os.statvfs(self.source)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")
        return {key: getattr(info, key) for key in keys}

    def chmod(self, path, mode):
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        return 0

    def truncate(self, path, length, fh=None):
        if path in (STATUS, CONTROL):
            return 0
        if fh is not None and not isinstance(fh, int):
            fh = fh.fh
        if fh:
            os.ftruncate(fh, length)
            self._state(self._name(path), fh).grow(length)
            return 0
        real = self._real(path)
        fd = os.open(real, os.O_WRONLY)
        try:
            os.ftruncate(fd, length)
            self._state(self._name(path), fd).grow(length)
        finally:
            os.close(fd)
        return 0

    # -- files ---------------------------------------------------------------------------

    def open(self, path, fi):
        if path == STATUS:
            fi.direct_io = 1  # Its size is unknown until read.
            fi.fh = 0
            return 0
        if path == CONTROL:
            fi.direct_io = 1
            fi.fh = 0
            return 0
        flags = fi.flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC)
        try:
            fi.fh = os.open(self._real(path), flags)
        except OSError as error:
            raise FuseOSError(error.errno)
        self._state(self._name(path), fi.fh)
        return 0

    def create(self, path, mode, fi=None):
        raise FuseOSError(errno.EROFS)

    def read(self, path, size, offset, fi):
        if path == STATUS:
            return self._status_bytes()[offset:offset + size]
        if path == CONTROL:
            raise FuseOSError(errno.EBADF)
        fd = fi.fh
        state = self._state(self._name(path), fd)
        if size > 0:
            first = offset // self.chunk
            last = (offset + size - 1) // self.chunk
            state.fetch(range(first, last + 1), self.delay)
        data = os.pread(fd, size, offset)
        with state.lock:
            state.bytes_read += len(data)
        return data

    def write(self, path, data, offset, fi):
        if path == CONTROL:
            self._control(data)
            return len(data)
        if path == STATUS:
            raise FuseOSError(errno.EBADF)
        fd = fi.fh
        state = self._state(self._name(path), fd)
        end = offset + len(data)
        if len(data) > 0:
            first = offset // self.chunk
            last = (end - 1) // self.chunk
            whole = [i for i in range(first, last + 1) if i * self.chunk >= offset and (i + 1) * self.chunk <= end]
            partial = [i for i in range(first, last + 1) if i not in whole]
            state.fetch(partial, self.delay)
            state.mark_warm(whole)
        written = os.pwrite(fd, data, offset)
        with state.lock:
            state.bytes_written += written
        return written

    def flush(self, path, fi):
        return 0

    def fsync(self, path, datasync, fi):
        if path in (STATUS, CONTROL):
            return 0
        if datasync:
            os.fdatasync(fi.fh)
        else:
            os.fsync(fi.fh)
        return 0

    def release(self, path, fi):
        if path in (STATUS, CONTROL):
            return 0
        os.close(fi.fh)
        return 0

    # -- control -------------------------------------------------------------------------

    def _control(self, data):
        try:
            command = json.loads(data.decode())
            name = command["file"]
            if "/" in name or name.startswith("."):
                raise ValueError("bad file name")
            state = self._state_by_name(name)
        except (ValueError, KeyError, TypeError, OSError) as error:
            print(f"cold-fuse: bad control command {data!r}: {error}", file=sys.stderr, flush=True)
            raise FuseOSError(errno.EINVAL)
        op = command.get("op")
        if op == "cool":
            state.cool()
        elif op == "initialize":
            rate = float(command["rateMiBps"]) * 1024 * 1024
            if rate <= 0:
                raise FuseOSError(errno.EINVAL)
            thread = threading.Thread(target=self._initialize, args=(state, rate), daemon=True)
            state.initializer = thread
            thread.start()
        else:
            raise FuseOSError(errno.EINVAL)

    def _initialize(self, state, rate):
        """Warms the file in chunk order at `rate` bytes per second (no fetch delay: EBS does it)."""
        started = time.monotonic()
        for index in range(state.count):
            due = started + (index + 1) * state.chunk / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            state.mark_warm([index])


def main():
    parser = argparse.ArgumentParser(description="serve volume images cold on first read (the ebs-cache lab)")
    parser.add_argument("source")
    parser.add_argument("mountpoint")
    parser.add_argument("--chunk-bytes", type=int, default=512 * 1024)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--holes", choices=("cold", "warm"), default="cold")
    parser.add_argument("--name", default="ebs-cache-cold")
    parser.add_argument("--fetch-log", help="append `<file> <chunk>` per chunk fetched, in order")
    args = parser.parse_args()
    if args.chunk_bytes < 4096 or args.chunk_bytes % 4096:
        parser.error("--chunk-bytes must be a multiple of 4096")
    if args.delay_ms < 0:
        parser.error("--delay-ms must not be negative")
    operations = ColdImages(args.source, args.chunk_bytes, args.delay_ms, args.holes == "warm", args.fetch_log)
    # A signal ends the process at once and leaves the mount in place (dead, answering ENOTCONN).
    # libfuse would instead unmount it lazily on SIGTERM, and a loop device set up on one of its
    # files would then name a path outside the lab root: the reaper (src/lab/reaper/cleanup.ts) could no
    # longer tell it is the lab's. The signals are blocked in every thread (libfuse's included)
    # and taken by one that exits; `fusermount -u` is how the lab ends it in order.
    stop = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    threading.Thread(target=lambda: (signal.sigwait(stop), os._exit(0)), daemon=True).start()
    FUSE(
        operations,
        args.mountpoint,
        raw_fi=True,
        foreground=True,
        nothreads=False,
        fsname=args.name,
        subtype=args.name,
        big_writes=True,
        max_read=131072,
        max_write=131072,
        attr_timeout=1,
        entry_timeout=1,
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="cold-fuse: %(levelname)s %(message)s")
    main()
