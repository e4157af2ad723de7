"""The README's promise: its first two commands do all set-up and run the main job and
the tests. The demo command is run here for real; CI runs the test command."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kf_testutil import REPO

README = REPO / "README.md"


def readme_commands() -> list[str]:
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert first_block, "README.md has no bash block"
    return [line.split("#", 1)[0].strip() for line in first_block.group(1).splitlines()
            if line.split("#", 1)[0].strip()]


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    assert text.index("```bash") < text.index("## "), "the commands come before any section"
    assert readme_commands() == ["./scripts/demo", "./scripts/test"]
    for command in readme_commands():
        script = REPO / command
        assert script.is_file() and os.access(script, os.X_OK), command


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    test_command = readme_commands()[1]
    assert re.search(rf"^{re.escape(test_command)}\b", ci, re.M), ci


@pytest.mark.slow
def test_demo_command_runs_the_main_job(tmp_path: Path, built_relu: Path) -> None:
    """Runs `./scripts/demo` in this Python environment with a private hub and cache.

    The cache is seeded with the session's relu build (same sources, same toolchain), so
    the build step finds it up to date instead of compiling torch's headers once more;
    compiling is covered by test_build.py. Publishing, loading and checking run for real.
    """
    cache = tmp_path / "cache"
    shutil.copytree(built_relu, cache / "kernelforge" / "demo" / "relu", symlinks=True)
    env = dict(os.environ)
    env.update(
        KERNELFORGE_VENV=sys.prefix,
        KERNELFORGE_HUB=str(tmp_path / "hub"),
        XDG_CACHE_HOME=str(cache),
    )
    proc = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True,
                          env=env, timeout=900, cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "up to date" in out
    assert "publish: kernels-community/relu version 1" in out
    assert re.search(r"get_kernel\('kernels-community/relu', backend='cpu'\) -> module relu_cpu_",
                     out), out
    assert out.count("relu(x) == torch.relu(x): yes") >= 3
    assert "demo: all outputs match torch.relu" in out
    assert (tmp_path / "hub" / "kernels-community" / "relu").is_dir()
