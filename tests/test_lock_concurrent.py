"""``kernelforge lock`` run twice at once on one project, or killed while it writes: real
processes, paused at a chosen step by a hook (a line on stdout, then a wait for a line on
stdin), so that the interleaving is the same on every run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kf_sharing import TESTS, isolate, make_variant, uid

from kernelforge.hub import LocalHub
from kernelforge.lock import lock_project, read_lock

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"
OTHER = "kernels-test/other"

# lock_project(argv[1]), paused (PAUSED on stdout, then a line read from stdin) at the
# first call of kernelforge.lock._pin.<argv[2]> (the module that locks), or of
# os.<argv[2]> on the lock file.
_PAUSED_LOCK = textwrap.dedent(
    """
    import os, sys
    from kf_sharing import cpu_only
    cpu_only()
    from kernelforge import lock
    from kernelforge.lock import _pin
    root, point = sys.argv[1], sys.argv[2]
    owner = os if point == "replace" else _pin
    orig, seen = getattr(owner, point), []
    def paused(*args, **kwargs):
        if not seen and (point != "replace" or str(args[1]).endswith("kernelforge.lock")):
            seen.append(1)
            print("PAUSED", flush=True)
            sys.stdin.readline()
        return orig(*args, **kwargs)
    setattr(owner, point, paused)
    lock.lock_project(root)
    print("DONE", flush=True)
    """
)


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def _publish(env: dict[str, Path], tmp_path: Path, repo: str) -> str:
    build = tmp_path / repo.replace("/", "_")
    make_variant(build, "torch-cpu", module_id=uid("conc"))
    return LocalHub(env["hub"]).publish(repo, build, version=1).commit


def _project(root: Path, *repos: str) -> None:
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(
        "[tool.kernelforge.dependencies]\n" + "".join(f'"{r}" = 1\n' for r in repos))


def _paused(root: Path, point: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_LOCK, str(root), point],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ), cwd=TESTS)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "PAUSED"
    return proc


def test_a_second_lock_waits_for_the_first_and_reads_the_project_after_it(
        tmp_path: Path, env) -> None:
    """A lock paused after reading pyproject.toml; the project gains a kernel; a second
    lock runs. The second waits (saying so) and, once the first has written, locks both
    kernels: the first's older reading of the project does not overwrite it."""
    _publish(env, tmp_path, REPO)
    other = _publish(env, tmp_path, OTHER)
    root = tmp_path / "project"
    _project(root, REPO)
    first = _paused(root, "_pin_revision")
    second = None
    try:
        _project(root, REPO, OTHER)  # edited while the first lock resolves
        second = subprocess.Popen([sys.executable, "-m", "kernelforge", "lock", str(root)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ), cwd=TESTS)
        assert second.stderr is not None
        # it either finishes at once (no lock between them) or says that it waits
        said = ""
        for line in second.stderr:
            said += line
            if "waiting for it to finish" in line:
                break
        assert first.stdin is not None
        first.stdin.write("go\n")
        first.stdin.close()
        assert first.wait(timeout=120) == 0
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, said + err
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    locked = read_lock(root).kernels  # not the first's, written last from its older reading
    assert sorted(locked) == [OTHER, REPO]
    assert locked[OTHER].commit == other
    assert "another 'kernelforge lock' of this project is running" in said


def test_a_temporary_a_killed_lock_left_is_removed_by_the_next_lock(
        tmp_path: Path, env) -> None:
    """Killed between writing the new lock file and renaming it over the old one: the old
    file stays, with the temporary beside it; the next lock removes that temporary (and
    nothing else)."""
    _publish(env, tmp_path, REPO)
    root = tmp_path / "project"
    _project(root, REPO)
    lock_project(root)
    before = (root / "kernelforge.lock").read_bytes()
    mine = [root / ".kernelforge.lock.notes.tmp", root / ".kernelforge.lock.0123456789ab"]
    for path in mine:
        path.write_text("the user's")
    proc = _paused(root, "replace")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert (root / "kernelforge.lock").read_bytes() == before
    assert len(list(root.glob(".kernelforge.lock.*.tmp"))) == 2  # the killed one's, and mine

    lock_project(root)
    assert sorted(root.glob(".kernelforge.lock.*")) == sorted(mine)  # and no lock file
    assert read_lock(root).require(REPO).commit
