"""The docker log copier: one small process per container, copying the container's log stream
from the Engine API into the task's two log FIFOs (Nomad's `docker_logger` plugin process,
drivers/docker/docklog/docker_logger.go `Start`). It outlives the agent, as raw_exec's shim does.

Usage: python -I -S logcopier.py ENDPOINT CONTAINER STDOUT_FIFO STDERR_FIFO STATE_DIR

Only the standard library: it runs as a script outside the agent's environment (`-I -S`, as
reaper.py), and stays small (about 10 MiB RSS; no json beyond one inspect, no http.client).

- **One per start.** The copier holds `STATE_DIR/logcopier.lock` (flock) for its life; a
  second one started for the same `STATE_DIR` reports the holder's pid and exits.
- **Starting.** The agent spawns it as a session leader with stdout on a report pipe
  (`logs.py`); it forks at once and the parent exits, so the copier is nobody's child to reap
  once the agent is gone. The copier inspects the container (a tty container's log stream is
  raw, another's multiplexed), opens the log stream, and reports one line on the pipe:
  `ok PID`, or `error MESSAGE` (Docker's own message, e.g. a logging driver that cannot be
  read) and exits 2. Its own diagnostics go to `STATE_DIR/logcopier.log`.
- **FIFOs.** Opened read-write, as shim.sh holds its FIFOs: opening never blocks, a write
  never raises SIGPIPE, and what is written while no agent reads waits in the pipe (1 MiB,
  pump.py `PIPE_SIZE`; then the copier blocks and the daemon keeps the rest in its log).
- **Cursor.** Every message is read with its timestamp (`timestamps=1`), which is stripped.
  Messages go out as they came in, one FIFO write per run of one stream within what one
  socket read brought; after each read's messages are written, one write of
  `STATE_DIR/logs.cursor` records the messages written within the last `WINDOW_NS` (at most
  `WINDOW_MAX`), as `ns stream crc32` lines. A copier started after this one died asks for
  `since=` the oldest of them and skips each message found there, so nothing is lost and
  nothing is repeated, except what the dead copier wrote after its last cursor write (the
  messages of one socket read, at most 64 KiB; with a container writing a line at a time,
  a line or two). The window (not only the last timestamp) covers Docker stamping stdout
  and stderr in two goroutines: a message of one stream may be stored after a later-stamped
  one of the other. About 90k short lines a second (Docker's own `logs` about 130k).
- **Ending.** When the stream ends the copier inspects the container: still running (the
  daemon restarted the stream) → it reads again from the cursor; gone or stopped → one last
  read without `follow` (from the cursor) collects anything the follow stream missed, then it
  exits. A daemon that does not answer is retried for `RETRY_FOR` seconds.
- **Spill.** A pipe dies with its last holder. Before exiting, for each FIFO, if no log pump
  holds the stream's lock (the agent is down), the copier moves what waits in the pipe to the
  spill file the next pump writes first — the names and the protocol of
  runtime/client/logs/spill.py, as shim.sh's `spill`.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
import zlib
from collections.abc import Iterator

CHUNK = 64 * 1024
WINDOW_NS = 500_000_000
WINDOW_MAX = 64
RETRY_FOR = 600.0
CONNECT_TIMEOUT = 10.0
STREAMS = {1: "stdout", 2: "stderr"}


class DockerAnswer(Exception):
    """The daemon answered with an error (its message, its status)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Http:
    """One `GET` over a fresh connection (`Connection: close`), the body read as it comes."""

    def __init__(self, endpoint: str, path: str, timeout: float | None,
                 sock: socket.socket | None = None) -> None:
        """Connect to `endpoint` (or use `sock`, connected), send the request, read the
        head; raises DockerAnswer for an error status, OSError when the daemon is away."""
        if sock is not None:
            self.sock = sock
        elif endpoint.startswith(("tcp://", "http://")):
            host, _, port = endpoint.split("://", 1)[1].rpartition(":")
            self.sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(CONNECT_TIMEOUT)
            self.sock.connect(endpoint.removeprefix("unix://"))
        self.sock.settimeout(timeout)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n"
                          .encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise OSError(errno.ECONNRESET, "the daemon closed the connection")
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip()
                        for k, _, v in (line.partition(":") for line in lines[1:])}
        if self.status >= 400:
            body = b"".join(self.body())
            try:
                message = str(json.loads(body)["message"])
            except (ValueError, KeyError, TypeError):
                message = body.decode(errors="replace").strip() or f"HTTP {self.status}"
            raise DockerAnswer(self.status, message)

    def _fill(self) -> bool:
        data = self.sock.recv(CHUNK)
        self.buf += data
        return bool(data)

    def body(self) -> Iterator[bytes]:
        """The body's bytes as they arrive (chunked or not); ends at its end."""
        try:
            if self.headers.get("transfer-encoding", "").lower() != "chunked":
                if self.buf:
                    yield self.buf
                while data := self.sock.recv(CHUNK):
                    yield data
                return
            # Chunked: every complete piece of what one recv brought, joined (Docker sends
            # each log message as a chunk of its own: one yield per message would cost a
            # FIFO write and a cursor write per line).
            buf, self.buf = self.buf, b""
            remaining, crlf = 0, False  # bytes left of the current chunk; its CRLF due
            while True:
                out, pos = [], 0
                while True:
                    if remaining:
                        take = min(remaining, len(buf) - pos)
                        if take:
                            out.append(buf[pos:pos + take])
                            pos, remaining = pos + take, remaining - take
                        if remaining:
                            break
                        crlf = True
                    if crlf:
                        if len(buf) - pos < 2:
                            break
                        pos, crlf = pos + 2, False
                    line_end = buf.find(b"\r\n", pos)
                    if line_end < 0:
                        break
                    remaining = int(buf[pos:line_end].split(b";")[0], 16)
                    pos = line_end + 2
                    if remaining == 0:  # the last chunk
                        if out:
                            yield b"".join(out)
                        return
                buf = buf[pos:]
                if out:
                    yield b"".join(out)
                data = self.sock.recv(CHUNK)
                if not data:
                    return
                buf += data
        finally:
            self.sock.close()


def get_json(endpoint: str, path: str) -> object:
    return json.loads(b"".join(Http(endpoint, path, CONNECT_TIMEOUT).body()))


def _days(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to the date (the proleptic Gregorian civil-from-days inverse)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + (yoe * 365 + yoe // 4 - yoe // 100 + doy) - 719468


_last_second = ("", 0)


def timestamp_ns(text: bytes) -> int:
    """Docker's RFC 3339 timestamp (`2026-12-08T00:40:00.123456789Z`, or with an offset) in
    ns since the epoch."""
    global _last_second
    s = text.decode()
    if s[:19] == _last_second[0]:  # lines come many to a second
        seconds = _last_second[1]
    else:
        seconds = (_days(int(s[0:4]), int(s[5:7]), int(s[8:10])) * 86400
                   + int(s[11:13]) * 3600 + int(s[14:16]) * 60 + int(s[17:19]))
        _last_second = (s[:19], seconds)
    rest, nanos = s[19:], 0
    if rest.startswith("."):
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        digits, rest = rest[1:i], rest[i:]
        nanos = int((digits + "000000000")[:9])
    if rest[:1] in ("+", "-"):
        offset = int(rest[1:3]) * 3600 + int(rest[4:6]) * 60
        seconds -= offset if rest[0] == "+" else -offset
    return seconds * 1_000_000_000 + nanos


class Cursor:
    """What was written lately: `(ns, stream, crc32)` in write order, and the file it lives in."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: collections.deque[tuple[int, int, int]] = collections.deque()
        self.newest = 0
        try:
            with open(path, "rb") as f:
                for line in f.read().split(b"\n"):
                    if line == b"end":
                        break
                    ns, stream, crc = line.split()
                    self.seen.append((int(ns), int(stream), int(crc)))
                    self.newest = max(self.newest, int(ns))
        except FileNotFoundError:
            pass
        except ValueError:
            log(f"cursor {path} unreadable, copying from the start")
            self.seen.clear()
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def since(self) -> str:
        """The `since` parameter that re-reads the window (empty: from the start)."""
        if not self.seen:
            return ""
        oldest = min(ns for ns, _, _ in self.seen)
        return f"{oldest // 1_000_000_000}.{oldest % 1_000_000_000:09d}"

    def add(self, ns: int, stream: int, crc: int) -> None:
        self.seen.append((ns, stream, crc))
        self.newest = max(ns, self.newest)
        while self.seen and (len(self.seen) > WINDOW_MAX
                             or self.seen[0][0] < self.newest - WINDOW_NS):
            self.seen.popleft()

    def save(self) -> None:
        """One write: a kill cannot land in the middle of it; a longer old content is cut
        by the `end` line."""
        text = "".join(f"{ns} {st} {crc}\n" for ns, st, crc in self.seen) + "end\n"
        os.pwrite(self.fd, text.encode(), 0)


def log(message: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {message}\n")
    sys.stderr.flush()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Copier:
    def __init__(self, endpoint: str, container: str, fifos: dict[int, int], cursor: Cursor
                 ) -> None:
        self.endpoint, self.container, self.fifos, self.cursor = (
            endpoint, container, fifos, cursor)
        self.tty = False

    def inspect(self) -> dict[str, object]:
        answer = get_json(self.endpoint, f"/containers/{self.container}/json")
        if not isinstance(answer, dict):
            raise DockerAnswer(500, f"inspect of {self.container}: not an object")
        config = answer.get("Config")
        self.tty = bool(config.get("Tty")) if isinstance(config, dict) else False
        state = answer.get("State")
        return state if isinstance(state, dict) else {}

    def open(self, follow: bool) -> Http:
        query = f"stdout=1&stderr=1&timestamps=1&follow={int(follow)}"
        if since := self.cursor.since():
            query += f"&since={since}"
        return Http(self.endpoint, f"/containers/{self.container}/logs?{query}", None)

    def copy(self, response: Http) -> None:
        """Copy one log response into the FIFOs, skipping what the cursor says was written."""
        skip = collections.Counter(self.cursor.seen)
        buf = b""
        for data in response.body():
            buf += data
            messages: list[tuple[int, bytes]] = []
            pos = 0  # parsed up to here (one slice per read, not one per message)
            if self.tty:  # raw: timestamped lines, all stdout
                while (end := buf.find(b"\n", pos)) >= 0:
                    messages.append((1, buf[pos:end + 1]))
                    pos = end + 1
            else:  # multiplexed: 8-byte headers (stream, 0, 0, 0, big-endian size)
                while len(buf) - pos >= 8:
                    end = pos + 8 + int.from_bytes(buf[pos + 4:pos + 8], "big")
                    if len(buf) < end:
                        break
                    messages.append((buf[pos], buf[pos + 8:end]))
                    pos = end
            buf = buf[pos:]
            self.write(messages, skip)

    def write(self, messages: list[tuple[int, bytes]],
              skip: collections.Counter[tuple[int, int, int]]) -> None:
        run: list[bytes] = []
        run_stream = 0
        written = False
        for stream, message in messages:
            stamp, _, line = message.partition(b" ")
            try:
                ns = timestamp_ns(stamp)
            except (ValueError, IndexError):
                ns, line = 0, message
            key = (ns, stream, zlib.crc32(line))
            if skip[key] > 0:
                skip[key] -= 1
                continue
            if stream not in self.fifos:
                continue
            if run and stream != run_stream:
                self.flush(run_stream, run)
                run = []
            run_stream = stream
            run.append(line)
            written = True
            self.cursor.add(*key)
        if run:
            self.flush(run_stream, run)
        if written:
            self.cursor.save()

    def flush(self, stream: int, run: list[bytes]) -> None:
        write_all(self.fifos[stream], b"".join(run))

    def run(self, report: int | None) -> int:
        """Copy until the container's stream ends for good; the exit status."""
        deadline = None
        while True:
            try:
                state = self.inspect()
                running = bool(state.get("Running")) or bool(state.get("Restarting"))
                response = self.open(follow=running)
                if report is not None:
                    os.write(report, f"ok {os.getpid()}\n".encode())
                    os.close(report)
                    report = None
                self.copy(response)
                deadline = None
                if running:
                    time.sleep(0.1)  # a stream the daemon ended at once must not spin
                    continue
                return 0
            except DockerAnswer as e:
                if report is not None:
                    os.write(report, f"error {e}\n".replace("\n", " ").strip().encode() + b"\n")
                    return 2
                if e.status == 404:  # the container was removed: nothing more to read
                    log(f"container gone: {e}")
                    return 0
                log(f"docker: {e}")
                return 2
            except OSError as e:
                if report is not None:
                    os.write(report, f"error cannot reach the docker daemon at "
                                     f"{self.endpoint}: {e}\n".encode())
                    return 2
                deadline = deadline or time.monotonic() + RETRY_FOR
                if time.monotonic() > deadline:
                    log(f"giving up: the docker daemon did not answer for {RETRY_FOR:.0f}s")
                    return 3
                log(f"the docker daemon does not answer ({e}); retrying")
                time.sleep(1.0)


def spill(fifo: str, fd: int) -> None:
    """Move what waits in the pipe to its spill file, unless a log pump holds the stream's
    lock (names: runtime/client/logs/spill.py `spill_path`, `lock_path`)."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except OSError:
        return
    directory, name = os.path.split(fifo)
    shared = os.path.dirname(directory)
    name = name.removesuffix(".fifo")
    try:
        lock = os.open(os.path.join(shared, f"{name}.lock"),
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        log(f"spill lock of {fifo}: {e}")
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a pump reads the stream: the agent is up
        os.close(lock)
        return
    try:
        os.set_blocking(fd, False)
        out = None
        while True:
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                break
            if not data:
                break
            if out is None:
                out = os.open(os.path.join(shared, f"{name}.spill"),
                              os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600)
            write_all(out, data)
        if out is not None:
            os.fsync(out)
            os.close(out)
    finally:
        os.close(lock)


def claim(state_dir: str) -> int:
    """Take `STATE_DIR/logcopier.lock` for this process's life (0), or return the pid of
    the copier that holds it: one copier per start, however often the agent asks."""
    fd = os.open(os.path.join(state_dir, "logcopier.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held = True
    else:
        held = False
    if held:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # the holder writes its pid just after locking
            text = os.pread(fd, 32, 0).strip()
            if text.isdigit():
                os.close(fd)
                return int(text)
            time.sleep(0.01)
        raise OSError(errno.EAGAIN, "another log copier holds the lock but names no pid")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return 0  # fd stays open: the lock is held until this process exits


def main(argv: list[str]) -> int:
    endpoint, container, out_path, err_path, state_dir = argv
    if os.fork() != 0:  # the parent exits at once: the copier is nobody's child to reap
        os._exit(0)
    report = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    logfile = os.open(os.path.join(state_dir, "logcopier.log"),
                      os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.dup2(logfile, 2)
    holder = claim(state_dir)
    if holder:  # a copier already serves this start: it is the one to name
        os.write(report, f"ok {holder}\n".encode())
        return 0
    fifos = {1: os.open(out_path, os.O_RDWR | os.O_CLOEXEC),
             2: os.open(err_path, os.O_RDWR | os.O_CLOEXEC)}
    copier = Copier(endpoint, container, fifos,
                    Cursor(os.path.join(state_dir, "logs.cursor")))
    try:
        status = copier.run(report)
    except BaseException as e:
        log(f"copier failed: {e!r}")
        status = 1
    for stream, path in ((1, out_path), (2, err_path)):
        spill(path, fifos[stream])
    log(f"done ({status})")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
