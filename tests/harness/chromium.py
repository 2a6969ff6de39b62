"""Headless Chromium (Debian's ``chromium``, installed by ``make engines``) driven over the DevTools protocol: open a
page, read its text as the page's scripts render it, click, take a screenshot. Only what the UI test needs."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

DEVTOOLS = re.compile(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/")


class Page:
    def __init__(self, ws: Any) -> None:
        self.ws, self.next_id = ws, 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, wanted: list[str], timeout_s: float = 90.0) -> str:
        """The page's text once it holds every string of ``wanted`` (AssertionError with the text after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.text()
            if all(w in text for w in wanted) or time.monotonic() > deadline:
                assert all(w in text for w in wanted), ([w for w in wanted if w not in text], text[:3000])
                return text
            time.sleep(0.5)

    def click_text(self, label: str) -> None:
        """Click the innermost element whose whole text is ``label``."""
        found = self.evaluate(
            "(() => { const e = [...document.querySelectorAll('body *')].find(e => e.childElementCount === 0 && "
            f"e.textContent.trim() === {json.dumps(label)}); if (e) e.click(); return !!e; }})()")
        assert found, f"no element reads {label!r}"

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path


@contextlib.contextmanager
def page(url: str, profile: Path, width: int = 1400, height: int = 1000) -> Iterator[Page]:
    """A headless Chromium on ``url`` (``profile``: its throwaway user-data directory)."""
    binary = shutil.which("chromium")
    assert binary, "chromium not found: `make engines` installs it (apt-get install chromium)"
    proc = subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--remote-debugging-port=0", f"--user-data-dir={profile}",
                             f"--window-size={width},{height}", "about:blank"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        port = next((m.group(1) for line in proc.stderr if (m := DEVTOOLS.search(line))), None)
        assert port, "chromium did not start its DevTools endpoint"
        # the rest of its stderr (D-Bus complaints of a machine without a session bus) must not fill the pipe
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        with connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as ws:
            p = Page(ws)
            p.call("Page.enable")
            p.call("Page.navigate", url=url)
            yield p
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
