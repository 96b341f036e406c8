"""A minimal W3C WebDriver client for Debian's chromium + chromium-driver (no Selenium, and
nothing that could download a browser or a driver). Async, so a server under test can run
in the same event loop."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from tests.support.server import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
TAB = "\ue004"
SHIFT_TAB = "\ue008\ue004"
CHROME_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1200,1500",
]


def browser_available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


class WebDriverError(RuntimeError):
    pass


class Browser:
    """chromedriver on a free loopback port, one headless chromium session, fresh profile."""

    def __init__(self) -> None:
        self._port = free_port()
        self._base = f"http://127.0.0.1:{self._port}"
        self._profile = tempfile.mkdtemp(prefix="elova-chromium-")
        self._driver: subprocess.Popen[bytes] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._session = ""

    async def __aenter__(self) -> Browser:
        self._driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self._port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": self._profile},
        )
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        for _ in range(100):
            try:
                async with self._http.get(self._base + "/status") as resp:
                    if (await resp.json())["value"]["ready"]:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            raise WebDriverError("chromedriver did not start")
        options = {"binary": CHROMIUM, "args": [*CHROME_ARGS, f"--user-data-dir={self._profile}"]}
        caps = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        value = await self._call("POST", "/session", {"capabilities": caps})
        self._session = value["sessionId"]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._session:
                await self._call("DELETE", f"/session/{self._session}")
        finally:
            if self._http is not None:
                await self._http.close()
            if self._driver is not None:
                self._driver.terminate()
                try:
                    self._driver.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._driver.kill()
                    self._driver.wait()
            shutil.rmtree(self._profile, ignore_errors=True)

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._http is not None
        kwargs = {"json": body} if body is not None else {}
        if method == "POST" and body is None:
            kwargs = {"json": {}}
        async with self._http.request(method, self._base + path, **kwargs) as resp:
            data = await resp.json()
        if resp.status != 200:
            raise WebDriverError(f"{method} {path}: {data.get('value')}")
        return data["value"]

    async def _s(self, method: str, path: str, body: Any = None) -> Any:
        return await self._call(method, f"/session/{self._session}{path}", body)

    async def get(self, url: str) -> None:
        await self._s("POST", "/url", {"url": url})

    async def url(self) -> str:
        return str(await self._s("GET", "/url"))

    async def title(self) -> str:
        return str(await self._s("GET", "/title"))

    async def source(self) -> str:
        return str(await self._s("GET", "/source"))

    async def find(self, css: str) -> str:
        value = await self._s("POST", "/element", {"using": "css selector", "value": css})
        return str(value[ELEMENT])

    async def find_all(self, css: str) -> list[str]:
        values = await self._s("POST", "/elements", {"using": "css selector", "value": css})
        return [str(v[ELEMENT]) for v in values]

    async def type(self, css: str, text: str) -> None:
        await self._s("POST", f"/element/{await self.find(css)}/value", {"text": text})

    async def click(self, css: str) -> None:
        await self._s("POST", f"/element/{await self.find(css)}/click")

    async def selected(self, element: str) -> bool:
        return bool(await self._s("GET", f"/element/{element}/selected"))

    async def click_element(self, element: str) -> None:
        await self._s("POST", f"/element/{element}/click")

    async def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(await self._s("GET", "/screenshot")))

    async def execute(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body: `arguments[i]`, `return …`) in the page."""
        return await self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    async def cdp(self, command: str, params: dict[str, Any] | None = None) -> Any:
        """A Chrome DevTools Protocol command (chromedriver's goog/cdp/execute)."""
        return await self._s("POST", "/goog/cdp/execute", {"cmd": command, "params": params or {}})

    async def viewport(self, width: int, height: int, *, mobile: bool | None = None) -> None:
        """Emulate a screen `width` CSS px wide (a phone below 600 px: mobile viewport rules)."""
        phone = width < 600 if mobile is None else mobile
        await self.cdp(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": phone},
        )

    async def full_screenshot(self, path: Path) -> None:
        """The whole page, not only what fits the viewport."""
        path.parent.mkdir(parents=True, exist_ok=True)
        shot = await self.cdp(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    async def press(self, keys: str) -> None:
        """Press WebDriver key codes together (TAB; SHIFT_TAB: shift held, then tab) on the
        focused element, and let go in reverse order."""
        downs = [{"type": "keyDown", "value": k} for k in keys]
        ups = [{"type": "keyUp", "value": k} for k in reversed(keys)]
        actions = [{"type": "key", "id": "keyboard", "actions": downs + ups}]
        await self._s("POST", "/actions", {"actions": actions})

    async def click_to_load(self, css: str, timeout: float = 15.0) -> None:
        """Click what loads a new page (a submit button, a link) and wait until it has."""
        await self.execute("window.__elovaOldPage = true;")
        await self.click(css)
        await self.wait_for(
            "return !window.__elovaOldPage && document.readyState === 'complete'", timeout
        )

    async def wait_for(self, script: str, timeout: float = 15.0) -> Any:
        """The first truthy value `script` returns, polled until `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = await self.execute(script)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise WebDriverError(f"still false after {timeout:g} s: {script[:80]}")
            await asyncio.sleep(0.1)

    async def wait_for_url(self, prefix: str, timeout: float = 15.0) -> str:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            current = await self.url()
            if current.startswith(prefix):
                return current
            if asyncio.get_running_loop().time() > deadline:
                raise WebDriverError(f"still at {current}, expected {prefix}…")
            await asyncio.sleep(0.1)
