"""What the command line writes where, and its exit codes, as a script reads them:
results on stdout, notes, warnings and errors on stderr; 0 success, 1 a failure, 2 bad
usage, 130 interrupted, 141 output cut off."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kf_testutil import write_noarch_project

from kernelforge.cli import main
from kernelforge.errors import HubError


def buffered_env() -> dict[str, str]:
    """The environment of a command run as scripts run it: stdout buffered by Python as
    usual (the test runner may have set PYTHONUNBUFFERED)."""
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    return env


# --- stdout is written line by line ----------------------------------------------------------


def test_a_log_of_both_streams_keeps_the_order_things_happened_in(tmp_path: Path) -> None:
    """``kernelforge build ... > log 2>&1``: the variant built first is logged before the
    error of the environment after it, not at the end, behind every error line."""
    project = write_noarch_project(tmp_path / "na")
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "kernelforge", "build", str(project),
             "--python", sys.executable, "--python", "/bin/true"],
            stdout=log, stderr=subprocess.STDOUT, env=buffered_env(), timeout=300)
    assert proc.returncode == 1
    lines = (tmp_path / "log").read_text().splitlines()
    built = next(i for i, line in enumerate(lines) if line.startswith("torch-cpu: built in"))
    failed = next(i for i, line in enumerate(lines) if line.startswith("error: --python "))
    assert built < failed, lines
    assert lines[-1] == "error: the build failed for 1 of 2 environments: /bin/true", lines


def test_a_reader_gone_before_an_error_ends_the_command_quietly(tmp_path: Path) -> None:
    """``kernelforge versions ... | head -0`` where the listing fails after its first line:
    exit 141 as for any closed pipe, not Python's "Exception ignored ... BrokenPipeError"
    at exit with code 120."""
    script = (
        "import sys\n"
        "import kernelforge.cli as cli\n"
        "from kernelforge.errors import HubError\n"
        "def listing(hub, repo):\n"
        "    print(f'{repo} in a hub')\n"
        "    raise HubError('the hub failed halfway')\n"
        "cli._versions = listing\n"
        f"sys.exit(cli.main(['versions', 'org/k', '--hub', {str(tmp_path / 'hub')!r}]))\n")
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-c", script], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=buffered_env(),
                              timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "Exception ignored" not in proc.stderr and "BrokenPipeError" not in proc.stderr


def test_torch_without_numpy_adds_nothing_to_stderr(tmp_path: Path) -> None:
    """In an environment without numpy (torch does not require it), torch warns on its
    import, in two lines of its own; a command that imports torch writes only its own
    lines all the same. Other warnings still show, and the caller's filters come back."""
    script = (
        "import sys, warnings\n"
        "sys.modules['numpy'] = None  # as where numpy is not installed\n"
        "import kernelforge.cli as cli\n"
        "def listing(hub, repo):\n"
        "    import torch\n"
        "    print(f'{repo}: torch {torch.__version__}')\n"
        "    warnings.warn('another warning', UserWarning)\n"
        "    return 0\n"
        "cli._versions = listing\n"
        "before = list(warnings.filters)\n"
        f"code = cli.main(['versions', 'org/k', '--hub', {str(tmp_path / 'hub')!r}])\n"
        "assert warnings.filters == before, 'the command left its filters behind'\n"
        "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-W", "default", "-c", script],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("org/k: torch "), proc.stdout
    assert "NumPy" not in proc.stderr, proc.stderr
    assert "UserWarning: another warning" in proc.stderr, proc.stderr



def _without_numpy(tmp_path: Path) -> dict[str, str]:
    """The environment of a Python process in which importing numpy fails as where it
    is not installed (torch then warns on its import), kernelforge importable."""
    fake = tmp_path / "no-numpy" / "numpy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = buffered_env()
    env["PYTHONPATH"] = os.pathsep.join([str(fake.parent), str(src)])
    env["PYTHONWARNINGS"] = "default"
    return env


def test_the_build_child_processes_add_no_torch_numpy_warning(tmp_path: Path) -> None:
    """The build's driver (whose output ``build -v`` shows line by line, and build.log
    keeps) and its load check import torch in processes of their own: there too, torch's
    warning where numpy is not installed is left out, as the command line leaves it out
    of its own stderr."""
    from kernelforge.build import _driver

    env = _without_numpy(tmp_path)
    spec = tmp_path / "spec.json"
    spec.write_text("{}")  # the driver imports its tooling, then stops at the first key
    proc = subprocess.run([sys.executable, "-m", "kernelforge.build._driver", str(spec)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.stderr.rstrip().endswith("KeyError: 'backend'"), proc.stderr
    assert "Warning" not in proc.stderr and "NumPy" not in proc.stderr, proc.stderr
    result = tmp_path / "load-check.json"
    proc = subprocess.run(
        [sys.executable, "-c", _driver._LOAD_SCRIPT, str(tmp_path / "missing.so"),
         str(result), _driver.TORCH_WITHOUT_NUMPY],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "missing.so" in json.loads(result.read_text())["error"]
    assert proc.stderr == ""
    # the stand-in for a missing numpy makes torch warn (else this test tests nothing)
    proc = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert _driver.TORCH_WITHOUT_NUMPY in proc.stderr, proc.stderr

@pytest.mark.parametrize(("stream", "during"), [
    # a file or pipe, buffered by Python: each line is written as it is printed
    (lambda: io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), True),
    # a terminal, or a program's own line-buffered stream: it stays line buffered
    (lambda: io.TextIOWrapper(io.BytesIO(), encoding="utf-8", line_buffering=True), True),
    # contextlib.redirect_stdout(io.StringIO()): no buffer to set, written all the same
    (io.StringIO, False),
], ids=["buffered", "line-buffered", "StringIO"])
def test_the_callers_stdout_keeps_its_buffering(
        monkeypatch: pytest.MonkeyPatch, stream: Callable[[], io.TextIOWrapper | io.StringIO],
        during: bool) -> None:
    """``main`` inside a program writes each line as it prints it, and leaves the
    program's stdout as it found it."""
    import kernelforge.cli as cli

    seen: list[bool] = []

    def listing(hub: object, repo: str) -> int:
        seen.append(sys.stdout.line_buffering)
        print(f"{repo} listed")
        return 0

    monkeypatch.setattr(cli, "_versions", listing)
    out = stream()
    before = out.line_buffering
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["versions", "org/k", "--hub", "/nonexistent-hub"]) == 0
    assert seen == [during]
    assert out.line_buffering is before
    out.seek(0)
    assert out.read() == "org/k listed\n"


def test_the_callers_stdout_keeps_its_buffering_when_the_reader_went_away(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed pipe leaves the line unwritten in the stream, whose flush fails again when
    the setting is put back: the setting still comes back (exit 141, as for any closed
    pipe)."""
    import kernelforge.cli as cli

    def listing(hub: object, repo: str) -> int:
        print(f"{repo} listed")
        return 0

    monkeypatch.setattr(cli, "_versions", listing)
    read, write = os.pipe()
    os.close(read)
    with open(write, "w", encoding="utf-8") as out:
        assert out.line_buffering is False
        monkeypatch.setattr(sys, "stdout", out)
        assert main(["versions", "org/k", "--hub", "/nonexistent-hub"]) == 141
        monkeypatch.undo()
        assert out.line_buffering is False
        print("written to /dev/null", file=out, flush=True)  # where its file points now


# --- keygen ----------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--force"]])
def test_keygen_with_an_empty_out_writes_no_key(
        extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``keygen --out "$UNSET"`` is bad usage: it wrote keys/default.pem instead (with
    --force replacing that key) and exited 0."""
    from kernelforge.trust import config_dir

    assert main(["keygen"]) == 0
    default = config_dir() / "keys" / "default.pem"
    before = default.read_bytes()
    capsys.readouterr()
    for blank in ("", " "):
        with pytest.raises(SystemExit) as info:
            main(["keygen", "--out", blank, *extra])
        assert info.value.code == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert (f"kernelforge keygen: error: argument --out: {blank!r}: an empty path is "
                "not a key file (it would read as --out left out); pass the private key's "
                "file path") in err, err
    assert default.read_bytes() == before


def test_keygen_says_its_note_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """What keygen prints on stdout is the key and how to use it; a note about the key it
    could not read goes to stderr with the other notes."""
    from kernelforge.trust import config_dir

    key = config_dir() / "keys" / "ci.pem"
    key.parent.mkdir(parents=True)
    key.write_text("not a key\n")
    assert main(["keygen", "--name", "ci", "--force"]) == 0
    out, err = capsys.readouterr()
    assert "note:" not in out, out
    assert out.startswith(f"private key: {key} (keep it secret)\npublic key:  ed25519:"), out
    assert err == (f"note: the replaced key {key} could not be read, so it may still be in "
                   "your trust store; check 'kernelforge trust list' and remove it with "
                   "'kernelforge trust remove KEY_ID'\n")


# --- a failure says so on stderr -------------------------------------------------------------


def test_info_of_a_kernel_the_trust_policy_refuses_fails_on_stderr_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_system: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The report stays on stdout; the exit code 1 comes with an ``error:`` line, as for
    every other failure, for a script that keeps stderr."""
    from kf_testutil import write_metadata

    from kernelforge.hub import LocalHub

    vdir = tmp_path / "b" / "build" / "torch-cpu"
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, "_kstreams_cpu_0000001")
    hub = LocalHub(tmp_path / "hub")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "publisher"))
    hub.publish("them/k", vdir.parent, version=1)
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "user"))
    argv = ["info", "them/k", "--hub", str(hub.root)]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "\ntrust: refused, not published by you" in out
    assert "\nto load it: " in out and "error" not in out
    assert err == ("error: a load of them/k (variant torch-cpu) would be refused, not "
                   "published by you, not signed by a trusted key and not allowed; no "
                   "signature (build/<variant>.sig)\n")
    assert main([*argv, "--allow", "them/k"]) == 0
    out, err = capsys.readouterr()
    assert "\ntrust: allowed by --allow" in out and err == ""


@pytest.mark.parametrize(("matched", "code"), [(True, 0), (False, 1)])
def test_a_demo_that_fails_its_check_says_so_on_stderr(
        matched: bool, code: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import kernelforge.demo

    def demo(*, hub: Path | None) -> bool:
        print("demo: " + ("all outputs match" if matched else "MISMATCH"))
        return matched

    monkeypatch.setattr(kernelforge.demo, "run_demo", demo)
    assert main(["demo"]) == code
    out, err = capsys.readouterr()
    assert out == ("demo: all outputs match\n" if matched else "demo: MISMATCH\n")
    assert err == ("" if matched else "error: the demo's kernel gave other outputs than "
                   "torch.relu (the lines marked NO above say for which device and dtype)\n")


# --- exit codes ------------------------------------------------------------------------------


def failing_listing(error: BaseException) -> Callable[[object, str], int]:
    """A ``versions`` listing that prints a line and then fails with ``error``."""
    def listing(hub: object, repo: str) -> int:
        print(f"{repo} in a hub")
        raise error
    return listing


@pytest.mark.parametrize(("error", "code", "said"), [
    (KeyboardInterrupt(), 130, "interrupted\n"),
    (PermissionError(13, "Permission denied", "/hub/org/k"),
     1, "error: [Errno 13] Permission denied: '/hub/org/k'\n"),
    (HubError("the hub failed"), 1, "error: the hub failed\n"),
])
def test_exit_codes_of_failures(error: BaseException, code: int, said: str,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """A failure keeps what was printed before it on stdout, and says itself in one line
    on stderr, with no traceback."""
    import kernelforge.cli as cli

    monkeypatch.setattr(cli, "_versions", failing_listing(error))
    assert main(["versions", "org/k", "--hub", "/nonexistent-hub"]) == code
    out, err = capsys.readouterr()
    assert out == "org/k in a hub\n"
    assert err == said


def test_a_ctrl_c_while_the_command_starts_exits_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import kernelforge.__main__
    import kernelforge.cli

    def interrupted(argv: object = None) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(kernelforge.cli, "main", interrupted)
    assert kernelforge.__main__.main() == 130
    assert capsys.readouterr() == ("", "interrupted\n")


def test_cache_list_json_writes_only_the_json_on_stdout(tmp_path: Path) -> None:
    """A warning about the cache (a folder no download makes) goes to stderr, so that
    stdout still parses."""
    import json

    from kernelforge.cache import DownloadCache

    root = tmp_path / "cache"
    root.mkdir()
    DownloadCache(root)._tag()  # as its first download leaves it
    stray = root / "variants" / "org" / "relu" / "not-a-commit" / "torch-cpu"
    stray.mkdir(parents=True)
    (stray / "entry.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "cache", "list", "--json",
                           "--cache", str(root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    assert proc.stderr == f"warning: ignoring {stray}: not a download cache entry\n"
