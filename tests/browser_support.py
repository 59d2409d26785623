"""A headless Chromium the tests drive over the Chrome DevTools Protocol, with the standard
library only: a WebSocket client of its own (RFC 6455, text frames, client-masked) on a socket
to 127.0.0.1, and real input events (``Input.dispatchMouseEvent``: the browser hit-tests the
point and clicks whatever is drawn there, as a person's click would).

Why not Playwright: its wheel carries a Node driver and expects a browser build of its own
(which can't be downloaded here); pointing it at the system Chromium works, but it is a large
dependency for four CDP calls. Every wait here is bounded, and the browser is killed on exit.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

#: Flags for a quiet headless browser that reaches nothing but the page it is given.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--disable-extensions"]


def chromium() -> str | None:
    """The system Chromium, or None when it isn't installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class _Socket:
    """One WebSocket connection: send a text frame, read the next text frame."""

    def __init__(self, url: str, timeout: float) -> None:
        rest = url.removeprefix("ws://")
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection at the handshake")
            head += chunk
        head, _, self.buffer = head.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def send(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x81, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, length)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def receive(self) -> str:
        """The next complete text message (continuation frames joined; others skipped)."""
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read(8))
            payload = self._read(length)  # the server never masks
            opcode = first & 0x0F
            if opcode in (0x1, 0x0):
                message += payload
                if first & 0x80:
                    return message.decode()
            elif opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")

    def close(self) -> None:
        self.sock.close()


class Browser:
    """A headless Chromium showing one page, driven over CDP. Use as a context manager.

    ``javascript`` False turns the page's scripts off before it loads
    (``Emulation.setScriptExecutionDisabled``: Chromium's ``--blink-settings=scriptEnabled=false``
    also stops ``--dump-dom`` from printing anything); ``html()`` then reads the DOM through
    DevTools, which needs no script of the page's."""

    def __init__(self, url: str, profile: Path, *, javascript: bool = True,
                 timeout: float = 30) -> None:
        self.timeout = timeout
        self.url = url
        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ids = 0
        try:
            port = self._port(profile)
            self.ws = _Socket(self._page_socket(port, url), timeout)
            if not javascript:
                self.call("Emulation.setScriptExecutionDisabled", value=True)
            self.call("Page.navigate", url=url)
            self._wait_loaded()
        except BaseException:
            self.close()
            raise

    def _wait_loaded(self) -> None:
        """Until the document at ``url`` has loaded its whole HTML (DOM.getDocument says its
        URL; its markup ends with ``</html>``), whether scripts run or not."""
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            try:
                root = self.call("DOM.getDocument", depth=1)["root"]
                if root.get("documentURL") == self.url and self.html().rstrip().endswith("</html>"):
                    return
            except RuntimeError as exc:  # the document was replaced between the two calls
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"{self.url} did not load in time (last error: {last})")

    def html(self) -> str:
        """The document's markup as the browser holds it now."""
        root = self.call("DOM.getDocument", depth=1)["root"]
        return self.call("DOM.getOuterHTML", nodeId=root["nodeId"])["outerHTML"]

    def _port(self, profile: Path) -> int:
        """The port Chromium chose, from the DevToolsActivePort file it writes."""
        deadline = time.monotonic() + self.timeout
        marker = profile / "DevToolsActivePort"
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited ({self.proc.returncode}) before DevTools opened")
            time.sleep(0.1)
        raise TimeoutError("chromium opened no DevTools port in time")

    def _page_socket(self, port: int, url: str) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise TimeoutError(f"chromium showed no page for {url} in time")

    def call(self, method: str, **params) -> dict:
        """One CDP command; its result (events that arrive meanwhile are dropped)."""
        self.ids += 1
        self.ws.send(json.dumps({"id": self.ids, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.receive())
            if reply.get("id") == self.ids:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
        raise TimeoutError(f"no answer to {method} in time")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str) -> None:
        """Until ``expression`` is true in the page (the page loaded, a script ran); an error
        meanwhile (the page still ``about:blank``, an element not there yet) counts as false."""
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            try:
                if self.evaluate(expression):
                    return
            except RuntimeError as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"{expression} never became true (last error: {last})")

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element ``selector`` names (scrolled into
        view first): pressed and released there, so the browser's hit test picks the target."""
        box = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return null; el.scrollIntoView({block: 'center'});"
            " const r = el.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2, w: r.width}; })()")
        if not box or not box["w"]:
            raise LookupError(f"nothing drawn for {selector}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"],
                      button="left" if kind != "mouseMoved" else "none", clickCount=1)

    def close(self) -> None:
        if getattr(self, "ws", None):
            self.ws.close()
        self.proc.kill()
        self.proc.wait(timeout=30)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
