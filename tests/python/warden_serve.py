"""Starting `warden serve` with `--port 0` and learning the port it picked, and reading its
/metrics text: shared by the end-to-end tests (conftest.py's WardenServer) and the benchmarks
that start a server (bench/http_attack.py, bench/soak.py). Python standard library only.
"""
from __future__ import annotations

import re
import subprocess
import threading

# The line `warden serve` prints once it listens, e.g. "... on http://127.0.0.1:40123 (...)".
ADDRESS_RE = re.compile(r"http://127\.0\.0\.1:(\d+)")


class ServeProcess:
    """Runs `cmd` (a `warden serve ... --host 127.0.0.1 --port 0` command line) and waits up to
    `timeout` seconds for the line naming its address. A reader thread keeps the server's stderr
    in `lines` (the first `max_lines` of them when given) for as long as it runs.

    After construction: `port` is the port it listens on, or None when it did not start; then
    `exited` tells whether it ended (its stderr closed) rather than running past the timeout.
    """

    def __init__(self, cmd: list[str], timeout: float, cwd=None, max_lines: int | None = None):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
        self.lines: list[str] = []
        port: list[int] = []
        ready = threading.Event()
        stderr_closed = threading.Event()

        def reader():
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace")
                if max_lines is None or len(self.lines) < max_lines:
                    self.lines.append(line)
                m = ADDRESS_RE.search(line)
                if m and not port:
                    port.append(int(m.group(1)))
                    ready.set()
            stderr_closed.set()
            ready.set()

        threading.Thread(target=reader, daemon=True).start()
        ready.wait(timeout)
        self.port: int | None = port[0] if port else None
        self.exited = self.port is None and stderr_closed.is_set()

    def log_tail(self, n: int = 2000) -> str:
        return "".join(self.lines)[-n:]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out
