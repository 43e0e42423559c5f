#!/usr/bin/python3
"""The lab's cold snapshots: a FUSE filesystem that serves volume images lazily loaded.

It mirrors every regular file of SOURCE (a flat folder of volume images, hard links of the
lab's images) at MOUNTPOINT, byte for byte, and keeps one bit per CHUNK-BYTES chunk of each
file: cold or warm. The first touch of a cold chunk waits DELAY-MS (the fetch from S3 of an EBS
volume restored from a snapshot), then the chunk is warm and served at the speed of the disk
underneath. A loop device set up on MOUNTPOINT/<file> (with direct I/O) is then a block device
that reads slowly on the first touch of each block and fast afterwards, as such an EBS volume does.

Per volume (file), as EBS serves one (see docs/lab.md, "Cold snapshots"):
- fetches run concurrently, up to FETCH-CONCURRENCY at once (first come, first served beyond
  that): a read of a cold chunk waits for its own fetch, not behind other reads' fetches, unless
  the volume's fetch slots are all taken;
- every read (warm or cold) spends the volume's throughput budget, THROUGHPUT-MIBPS (gp3's
  baseline is 125 MiB/s): reads beyond it queue in arrival order;
- the chunks of one request are fetched in parallel, each in a slot of its own; a chunk already
  being fetched is waited for, not fetched twice.
Requests are served concurrently (pyfuse3 on libfuse 3, trio tasks): with the kernel's
asynchronous direct I/O, a loop device with direct I/O on passes its reads on in parallel.
- Writes: a chunk written whole becomes warm at once; a partial write to a cold chunk fetches
  it first (the rest of the block has to come from the snapshot).
- --holes warm: chunks holding no data in the image (holes of the sparse file, found with
  SEEK_DATA) start warm; the default (cold) treats every chunk of the volume as cold.
- MOUNTPOINT/.cold-status.json (read-only) gives per file: chunks, warm chunks, fetches,
  delayed milliseconds, the first-read delay, bytes read and written, the most fetches that
  were in flight at once.
- --fetch-log FILE: one line `<file> <chunk index> <queued ms> <r|w>` per chunk fetched, in the
  order fetched (what was read first on a cold volume; tests check the pre-warm's order with it):
  how long the fetch waited for one of the volume's fetch slots (behind others' fetches), and
  whether a read or a partial write asked for it (benches tell a service's reads from a
  pre-warm's with it).
- MOUNTPOINT/.cold-control (write-only) takes one JSON command per write:
  {"op": "initialize", "file": "<name>", "rateMiBps": N}: warms the file in the background at
  N MiB/s, in chunk order (EBS's provisioned-rate initialization);
  {"op": "cool", "file": "<name>"}: every chunk cold again (tests);
  {"op": "delay", "file": "<name>", "delayMs": N}: the file's first-read delay from now on (a
  test that reads a whole volume once its cold reads are measured).

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

import pyfuse3
import trio

STATUS = ".cold-status.json"
CONTROL = ".cold-control"
STATUS_INODE = pyfuse3.ROOT_INODE + 1
CONTROL_INODE = pyfuse3.ROOT_INODE + 2
FIRST_FILE_INODE = pyfuse3.ROOT_INODE + 10
MiB = 1024 * 1024


class VolumeBudget:
    """What one volume can do at once: fetch slots and a throughput clock (FIFO for both)."""

    def __init__(self, fetch_concurrency, throughput_bps):
        self.slots = trio.Semaphore(fetch_concurrency)
        self.throughput = throughput_bps
        self.next_free = 0.0  # trio clock time at which the budget is free again
        self.in_flight = 0
        self.most_in_flight = 0

    async def transfer(self, size):
        """Waits until `size` bytes fit in the volume's throughput, after those queued before them."""
        if self.throughput <= 0 or size <= 0:
            return
        now = trio.current_time()
        start = max(now, self.next_free)
        self.next_free = start + size / self.throughput
        await trio.sleep_until(self.next_free)


class ChunkState:
    """The cold/warm bits of one file, and what was done to it."""

    def __init__(self, size, chunk, holes_warm, fd, budget, on_fetched=None):
        self.chunk = chunk
        self.budget = budget
        self.on_fetched = on_fetched  # called with (chunk index, queued seconds, "r" | "w") per fetch, in order
        self.count = (size + chunk - 1) // chunk
        self.warm = bytearray(self.count)
        self.fetching = {}  # chunk index -> trio.Event set when its fetch ends
        self.fetches = 0
        self.delayed_ms = 0.0
        self.bytes_read = 0
        self.bytes_written = 0
        self.initializing = False
        self.delay = None  # seconds; None: the process's --delay-ms
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
        if count > self.count:
            # Space added to a volume is new: nothing to fetch.
            self.warm.extend(b"\x01" * (count - self.count))
            self.count = count

    async def _fetch_one(self, index, event, delay, kind):
        budget = self.budget
        asked = trio.current_time()
        async with budget.slots:
            queued = trio.current_time() - asked
            budget.in_flight += 1
            budget.most_in_flight = max(budget.most_in_flight, budget.in_flight)
            started = trio.current_time()
            try:
                await trio.sleep(delay)
            finally:
                budget.in_flight -= 1
        self.warm[index] = 1
        del self.fetching[index]
        self.fetches += 1
        self.delayed_ms += (trio.current_time() - started) * 1000
        event.set()
        if self.on_fetched is not None:
            self.on_fetched(index, queued, kind)

    async def fetch(self, indexes, delay, kind="r"):
        """Makes the chunks warm: fetches those nobody fetches yet (in parallel), waits for the others."""
        mine = []
        theirs = []
        for index in indexes:
            if index >= self.count or self.warm[index]:
                continue
            event = self.fetching.get(index)
            if event is None:
                event = trio.Event()
                self.fetching[index] = event
                mine.append((index, event))
            else:
                theirs.append(event)
        if len(mine) == 1:
            await self._fetch_one(mine[0][0], mine[0][1], delay, kind)
        elif mine:
            async with trio.open_nursery() as nursery:
                for index, event in mine:
                    nursery.start_soon(self._fetch_one, index, event, delay, kind)
        for event in theirs:
            await event.wait()

    def mark_warm(self, indexes):
        for index in indexes:
            if index < self.count:
                self.warm[index] = 1

    def cool(self):
        self.warm = bytearray(self.count)

    def status(self, delay):
        return {
            "chunks": self.count,
            "warmChunks": self.count - self.warm.count(0),
            "fetches": self.fetches,
            "delayedMs": round(self.delayed_ms),
            "firstReadDelayMs": delay * 1000,
            "bytesRead": self.bytes_read,
            "bytesWritten": self.bytes_written,
            "mostFetchesInFlight": self.budget.most_in_flight,
            "initializing": self.initializing,
        }


class ColdImages(pyfuse3.Operations):
    def __init__(self, source, chunk, delay_ms, holes_warm, fetch_concurrency, throughput_mibps, fetch_log=None):
        super().__init__()
        self.fetch_log = open(fetch_log, "a", buffering=1) if fetch_log else None
        self.source = os.path.realpath(source)
        self.chunk = chunk
        self.delay = delay_ms / 1000.0
        self.holes_warm = holes_warm
        self.fetch_concurrency = fetch_concurrency
        self.throughput = throughput_mibps * MiB
        self.states = {}  # (name, inode) -> ChunkState
        self.inodes = {}  # name -> our inode number
        self.names = {}  # our inode number -> name
        self.handles = {}  # fh -> (name, fd) of an image, or ("status", bytes) / ("control", None)
        self.next_fh = 1
        self.nursery = None  # set by main(): background initializations run in it

    # -- helpers -------------------------------------------------------------------------

    def _logged(self, name, index, queued, kind):
        """Appends `<file> <chunk> <queued ms> <r|w> <unix time s>` per chunk fetched to --fetch-log (the order of
        first reads; the time the fetch ended)."""
        if self.fetch_log is not None:
            self.fetch_log.write(f"{name} {index} {queued * 1000:.1f} {kind} {time.time():.3f}\n")

    def _inode_of(self, name):
        inode = self.inodes.get(name)
        if inode is None:
            inode = FIRST_FILE_INODE + len(self.inodes)
            self.inodes[name] = inode
            self.names[inode] = name
        return inode

    def _name_of(self, inode):
        name = self.names.get(inode)
        if name is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return name

    def _state(self, name, fd):
        info = os.fstat(fd)
        key = (name, info.st_ino)
        state = self.states.get(key)
        if state is None:
            # A file of that name with another inode was deleted and replaced: forget it.
            for other in [k for k in self.states if k[0] == name]:
                del self.states[other]
            budget = VolumeBudget(self.fetch_concurrency, self.throughput)
            state = ChunkState(
                info.st_size,
                self.chunk,
                self.holes_warm,
                fd,
                budget,
                on_fetched=lambda index, queued, kind, n=name: self._logged(n, index, queued, kind),
            )
            self.states[key] = state
        return state

    def _state_by_name(self, name):
        fd = os.open(os.path.join(self.source, name), os.O_RDONLY)
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
                state = self._state_by_name(name)
                files[name] = state.status(self._delay_of(state))
            except OSError:
                continue
        document = {
            "chunkBytes": self.chunk,
            "delayMs": self.delay * 1000,
            "fetchConcurrency": self.fetch_concurrency,
            "throughputMiBps": self.throughput / MiB,
            "files": files,
        }
        return (json.dumps(document) + "\n").encode()

    def _attrs(self, inode):
        attrs = pyfuse3.EntryAttributes()
        now = time.time_ns()
        attrs.st_ino = inode
        attrs.entry_timeout = 1
        attrs.attr_timeout = 1
        if inode == pyfuse3.ROOT_INODE:
            info = os.lstat(self.source)
            attrs.st_mode = info.st_mode
            attrs.st_nlink = info.st_nlink
            attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = now
            return attrs
        if inode in (STATUS_INODE, CONTROL_INODE):
            attrs.st_mode = stat.S_IFREG | (0o444 if inode == STATUS_INODE else 0o200)
            attrs.st_nlink = 1
            attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = now
            return attrs
        try:
            info = os.lstat(os.path.join(self.source, self._name_of(inode)))
        except OSError as error:
            raise pyfuse3.FUSEError(error.errno)
        if not stat.S_ISREG(info.st_mode):
            raise pyfuse3.FUSEError(errno.ENOENT)
        for key in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_blocks"):
            setattr(attrs, key, getattr(info, key))
        attrs.st_blksize = 4096
        attrs.st_atime_ns, attrs.st_mtime_ns, attrs.st_ctime_ns = info.st_atime_ns, info.st_mtime_ns, info.st_ctime_ns
        return attrs

    # -- metadata ------------------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        name = os.fsdecode(name)
        if name == STATUS:
            return self._attrs(STATUS_INODE)
        if name == CONTROL:
            return self._attrs(CONTROL_INODE)
        if not name or "/" in name or name.startswith(".") or not os.path.exists(os.path.join(self.source, name)):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(self._inode_of(name))

    async def getattr(self, inode, ctx=None):
        return self._attrs(inode)

    async def setattr(self, inode, attr, fields, fh, ctx):
        if fields.update_size and inode not in (STATUS_INODE, CONTROL_INODE):
            name = self._name_of(inode)
            fd = os.open(os.path.join(self.source, name), os.O_WRONLY)
            try:
                os.ftruncate(fd, attr.st_size)
                self._state(name, fd).grow(attr.st_size)
            finally:
                os.close(fd)
        # Mode, owner and times are the image's own: not changed through the layer.
        return self._attrs(inode)

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        names = [n for n in sorted(os.listdir(self.source)) if not n.startswith(".")]
        entries = [(STATUS, STATUS_INODE), (CONTROL, CONTROL_INODE)] + [(n, self._inode_of(n)) for n in names]
        for index in range(start_id, len(entries)):
            name, inode = entries[index]
            try:
                attrs = self._attrs(inode)
            except pyfuse3.FUSEError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, index + 1):
                break

    async def releasedir(self, fh):
        return

    async def statfs(self, ctx):
        info = os.statvfs(self.source)
        data = pyfuse3.StatvfsData()
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_frsize")
        for key in keys + ("f_namemax",):
            setattr(data, key, getattr(info, key))
        return data

    # -- files ---------------------------------------------------------------------------

    def _new_handle(self, value):
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = value
        return fh

    async def open(self, inode, flags, ctx):
        if inode == STATUS_INODE:
            # Its size is unknown until read: direct I/O, the document taken at open.
            return pyfuse3.FileInfo(fh=self._new_handle(("status", self._status_bytes())), direct_io=True)
        if inode == CONTROL_INODE:
            return pyfuse3.FileInfo(fh=self._new_handle(("control", None)), direct_io=True)
        name = self._name_of(inode)
        # O_DIRECT is the loop device's (it makes the kernel pass reads on in parallel); the
        # image underneath is read through the page cache, as EBS serves a warm block.
        wanted = flags & (os.O_ACCMODE | os.O_APPEND)
        try:
            fd = os.open(os.path.join(self.source, name), wanted)
        except OSError as error:
            raise pyfuse3.FUSEError(error.errno)
        self._state(name, fd)
        return pyfuse3.FileInfo(fh=self._new_handle((name, fd)))

    async def create(self, parent_inode, name, mode, flags, ctx):
        raise pyfuse3.FUSEError(errno.EROFS)

    async def read(self, fh, offset, size):
        kind, value = self.handles[fh]
        if kind == "status":
            return value[offset:offset + size]
        if kind == "control":
            raise pyfuse3.FUSEError(errno.EBADF)
        state = self._state(kind, value)
        if size > 0:
            first = offset // self.chunk
            last = (offset + size - 1) // self.chunk
            await state.fetch(range(first, last + 1), self._delay_of(state))
            await state.budget.transfer(size)
        data = os.pread(value, size, offset)
        state.bytes_read += len(data)
        return data

    async def write(self, fh, offset, data):
        kind, value = self.handles[fh]
        if kind == "control":
            self._control(bytes(data))
            return len(data)
        if kind == "status":
            raise pyfuse3.FUSEError(errno.EBADF)
        state = self._state(kind, value)
        end = offset + len(data)
        if len(data) > 0:
            first = offset // self.chunk
            last = (end - 1) // self.chunk
            whole = [i for i in range(first, last + 1) if i * self.chunk >= offset and (i + 1) * self.chunk <= end]
            partial = [i for i in range(first, last + 1) if i not in whole]
            await state.fetch(partial, self._delay_of(state), "w")
            state.mark_warm(whole)
            await state.budget.transfer(len(data))
        written = os.pwrite(value, data, offset)
        state.bytes_written += written
        return written

    async def flush(self, fh):
        return

    async def fsync(self, fh, datasync):
        kind, value = self.handles[fh]
        if kind in ("status", "control"):
            return
        if datasync:
            os.fdatasync(value)
        else:
            os.fsync(value)

    async def release(self, fh):
        kind, value = self.handles.pop(fh, (None, None))
        if kind not in (None, "status", "control"):
            os.close(value)

    def _delay_of(self, state):
        return self.delay if state.delay is None else state.delay

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
            raise pyfuse3.FUSEError(errno.EINVAL)
        op = command.get("op")
        if op == "cool":
            state.cool()
        elif op == "delay":
            delay_ms = float(command["delayMs"])
            if not delay_ms >= 0:
                raise pyfuse3.FUSEError(errno.EINVAL)
            state.delay = delay_ms / 1000.0
        elif op == "initialize":
            rate = float(command["rateMiBps"]) * MiB
            if rate <= 0 or self.nursery is None:
                raise pyfuse3.FUSEError(errno.EINVAL)
            state.initializing = True
            self.nursery.start_soon(self._initialize, state, rate)
        else:
            raise pyfuse3.FUSEError(errno.EINVAL)

    async def _initialize(self, state, rate):
        """Warms the file in chunk order at `rate` bytes per second (no fetch delay: EBS does it)."""
        started = trio.current_time()
        try:
            for index in range(state.count):
                await trio.sleep_until(started + (index + 1) * state.chunk / rate)
                state.mark_warm([index])
        finally:
            state.initializing = False


async def serve(operations):
    async with trio.open_nursery() as nursery:
        operations.nursery = nursery
        await pyfuse3.main(min_tasks=8, max_tasks=256)
        nursery.cancel_scope.cancel()


def main():
    parser = argparse.ArgumentParser(description="serve volume images cold on first read (the ebs-cache lab)")
    parser.add_argument("source")
    parser.add_argument("mountpoint")
    parser.add_argument("--chunk-bytes", type=int, default=512 * 1024)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--fetch-concurrency", type=int, default=8)
    parser.add_argument("--throughput-mibps", type=float, default=125.0, help="0: no throughput cap")
    parser.add_argument("--holes", choices=("cold", "warm"), default="cold")
    parser.add_argument("--name", default="ebs-cache-cold")
    parser.add_argument("--fetch-log", help="append `<file> <chunk> <queued ms> <r|w>` per chunk fetched, in order")
    args = parser.parse_args()
    if args.chunk_bytes < 4096 or args.chunk_bytes % 4096:
        parser.error("--chunk-bytes must be a multiple of 4096")
    if args.delay_ms < 0:
        parser.error("--delay-ms must not be negative")
    if args.fetch_concurrency < 1:
        parser.error("--fetch-concurrency must be at least 1")
    if args.throughput_mibps < 0:
        parser.error("--throughput-mibps must not be negative")
    operations = ColdImages(
        args.source,
        args.chunk_bytes,
        args.delay_ms,
        args.holes == "warm",
        args.fetch_concurrency,
        args.throughput_mibps,
        args.fetch_log,
    )
    # A signal ends the process at once and leaves the mount in place (dead, answering ENOTCONN).
    # Unmounting it here instead would leave a loop device set up on one of its files naming a
    # path outside the lab root: the reaper (src/lab/reaper/cleanup.ts) could no longer tell it is
    # the lab's. The signals are blocked in every thread and taken by one that exits;
    # `fusermount -u` is how the lab ends it in order.
    stop = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    threading.Thread(target=lambda: (signal.sigwait(stop), os._exit(0)), daemon=True).start()
    options = set(pyfuse3.default_options)
    options.discard("default_permissions")
    options.update({f"fsname={args.name}", f"subtype={args.name}"})
    pyfuse3.init(operations, args.mountpoint, options)
    try:
        trio.run(serve, operations)
    finally:
        pyfuse3.close(unmount=False)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="cold-fuse: %(levelname)s %(message)s")
    main()
