"""What a person checks on a page, measured in the browser: horizontal overflow, WCAG 2.1 AA
contrast of text (1.4.3) and of input and button borders (1.4.11), a visible keyboard focus,
and controls with labels. Each check returns a list of problems (empty: the page passes),
so a failure names every offending element at once.

Contrast is computed from getComputedStyle: the colour over the element's effective
background (the background colours of it and its ancestors, composited), with the WCAG
relative-luminance formula. Native check boxes and radio buttons are drawn by the browser
(their border is not in the computed style) and are left out of the border check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.auth.pages.webdriver import TAB, Browser

_SCRIPT = (Path(__file__).with_name("page_checks.js")).read_text("utf-8")


def _call(check: str) -> str:
    return f"{_SCRIPT}\nreturn {check};"


async def overflow_problems(browser: Browser, width: int) -> list[str]:
    return list(await browser.execute(_call("overflow(arguments[0])"), width))


async def contrast_problems(browser: Browser) -> list[str]:
    return list(await browser.execute(_call("contrast()")))


async def label_problems(browser: Browser) -> list[str]:
    return list(await browser.execute(_call("labels()")))


async def focus_walk(
    browser: Browser, presses: int, start: str | None = None
) -> tuple[list[str], list[str]]:
    """Press Tab `presses` times from the top of the page (or from the element `start`
    selects): what got focus, and the problems of its focus indicator."""
    if start is None:
        await browser.execute("document.activeElement.blur(); window.scrollTo(0, 0);")
    else:
        await browser.execute("document.querySelector(arguments[0]).focus();", start)
    visited: list[str] = []
    problems: list[str] = []
    for _ in range(presses):
        await browser.press(TAB)
        got: Any = await browser.execute(_call("focused()"))
        if got is None:
            continue
        visited.append(got["name"])
        problems += [f"{got['name']}: {p}" for p in got["problems"]]
    return visited, problems
