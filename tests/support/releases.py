"""Earlier releases of this service, taken from git history, to serve beside the current code.

    files = newest_migrations(2)                  # the newest migration files of this tree
    commit = release_before(files)                # main's newest commit without any of them
    with release_tree(commit) as old_root:        # its files in a temporary directory
        Replica(old_root, env, port).start()      # `python -m service serve` of that code

A release is a commit on the first-parent history of HEAD (main's own line: a branch merged
into it counts from its merge commit). `release_tree` copies the commit's files with `git
archive` into a temporary directory and removes it afterwards; nothing is committed or
checked out. Old and current code run in this venv: `python -m service` from the tree's root
with the tree first on PYTHONPATH, so the tree's own `service` package is the one imported.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = Path("service/store/migrations")


class NoEarlierRelease(Exception):
    """History cannot give the release asked for (a shallow clone, no git, too few commits)."""


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.CalledProcessError) as err:
        raise NoEarlierRelease(f"git {' '.join(args)} failed: {err}") from err
    return done.stdout


def newest_migrations(count: int) -> list[Path]:
    """The `count` migration files of this tree added last (relative to its root): files not
    committed yet, then by the commit of main's line that added them, newest first. Not by
    number: each area has its own range of numbers (docs/architecture.md), so a migration
    added today may carry a lower number than one added yesterday."""
    present = {MIGRATIONS / p.name for p in (ROOT / MIGRATIONS).glob("[0-9][0-9][0-9][0-9]_*.sql")}
    if len(present) < count:
        raise NoEarlierRelease(f"this tree has {len(present)} migrations, not {count}")
    log = _git(
        "log", "--first-parent", "--diff-merges=first-parent", "--diff-filter=A",
        "--name-only", "--format=", "HEAD", "--", str(MIGRATIONS),
    ).split()  # fmt: skip
    added = [Path(name) for name in log]  # newest commit first, each file once
    age = {path: i for i, path in reversed(list(enumerate(added)))}
    order = sorted(present, key=lambda p: (age.get(p, -1), -int(p.name[:4])))
    return order[:count]


def _exists_at(commit: str, files: Sequence[Path]) -> list[Path]:
    listed = _git("ls-tree", "--name-only", commit, "--", *map(str, files)).split()
    return [Path(name) for name in listed]


def release_before(files: Sequence[Path]) -> str:
    """The newest commit of main's line (first parents from HEAD) where none of `files` exists:
    HEAD itself for files not committed yet, else the first parent of the oldest commit on
    that line that added one of them."""
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        raise NoEarlierRelease("a shallow clone: the previous release is not in its history")
    head = _git("rev-parse", "HEAD").strip()
    if not _exists_at(head, files):
        return head
    adders = _git(
        "log", "--first-parent", "--diff-merges=first-parent", "--diff-filter=A",
        "--format=%H", "--no-patch", "HEAD", "--", *map(str, files),
    ).split()  # fmt: skip
    if not adders:
        raise NoEarlierRelease(f"no commit on main's line added {', '.join(map(str, files))}")
    try:
        commit = _git("rev-parse", "--verify", "--quiet", f"{adders[-1]}^1").strip()
    except NoEarlierRelease as err:
        raise NoEarlierRelease(f"{adders[-1]} has no parent: no earlier release") from err
    still = _exists_at(commit, files)
    if still:
        raise NoEarlierRelease(f"{commit} already has {still[0]} (deleted and added again?)")
    return commit


def describe(commit: str) -> str:
    """`<short hash> <date> <subject>` of a commit, for messages."""
    return _git("log", "-1", "--format=%h %cI %s", commit).strip()[:120]


@contextlib.contextmanager
def release_tree(commit: str) -> Iterator[Path]:
    """The commit's files in a temporary directory, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"elova-release-{commit[:8]}-"))
    try:
        archive = folder / "tree.tar"
        _git("archive", "--format=tar", "-o", str(archive), commit)
        subprocess.run(["tar", "-xf", str(archive), "-C", str(folder)], check=True, timeout=60)
        archive.unlink()
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def code_env(root: Path, settings: Mapping[str, str]) -> dict[str, str]:
    """The environment that runs `python -m service` of the code at `root` with `settings`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    if root != ROOT:
        # `make test` measures the current code in its subprocesses too (coverage's
        # subprocess patch): not an earlier release's, whose files are gone by the report.
        for name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
            base.pop(name, None)
    return {**base, **settings, "PYTHONPATH": str(root)}


def run_command(
    root: Path, settings: Mapping[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m service <args>` of the code at `root`; the caller checks the result."""
    return subprocess.run(
        [sys.executable, "-m", "service", *args], cwd=root, env=code_env(root, settings),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def missing_dependency(root: Path) -> str | None:
    """The module the code at `root` imports that this venv lacks, if any."""
    done = subprocess.run(
        [sys.executable, "-c", "import service.app, service.__main__"], cwd=root,
        env=code_env(root, {}), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode == 0:
        return None
    if "ModuleNotFoundError" in done.stderr:
        return done.stderr.strip().splitlines()[-1]
    raise RuntimeError(f"the code at {root} does not import:\n{done.stderr}")


class Replica:
    """One `python -m service serve` of the code at `root` on `port`; its output in a file."""

    def __init__(self, root: Path, settings: Mapping[str, str], port: int) -> None:
        self.root, self.settings, self.port = root, dict(settings), port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = Path(tempfile.mkstemp(prefix=f"elova-release-{port}-", suffix=".log")[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Replica:
        with self._log.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "service", "serve"], cwd=self.root,
                env=code_env(self.root, {**self.settings, "ELOVA_PORT": str(self.port)}),
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._proc.poll() is not None:
                raise RuntimeError(f"serve on {self.port} exited:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"serve on {self.port} not ready in {timeout} s:\n{self.output()}"
                )
            time.sleep(0.05)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/readyz", timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for the exit (SIGKILL past `timeout`); the exit status."""
        proc, self._proc = self._proc, None
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise

    def output(self) -> str:
        return self._log.read_text("utf-8", errors="replace")

    def close(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.stop()
        self._log.unlink(missing_ok=True)
