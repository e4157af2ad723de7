"""The `kernelforge` command: exit codes, messages, and the init -> build -> publish ->
versions -> get_kernel loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kf_testutil import EXAMPLE_RELU

from kernelforge.cli import main


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelforge", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "kernelforge 0.1.0" in capsys.readouterr().out
    proc = run_cli("--help")
    assert proc.returncode == 0
    for command in ("init", "check", "build", "publish", "versions", "demo"):
        assert command in proc.stdout


def test_check_accepts_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLE_RELU)]) == 0
    out = capsys.readouterr().out
    assert "build.toml: ok" in out
    assert "relu_cpu (cpu)" in out and "(cuda)" in out


def test_check_reports_errors_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "build.toml").write_text('[general]\nname = "x"\nedition = 5\nversoin = 1\n')
    proc = run_cli("check", str(tmp_path))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "build.toml" in proc.stderr and "general.versoin" in proc.stderr
    assert "did you mean 'version'" in proc.stderr


def test_usage_error_exits_2() -> None:
    proc = run_cli("build", "--no-such-flag")
    assert proc.returncode == 2
    assert "unrecognized arguments" in proc.stderr


def test_init_rejects_bad_names_and_existing_dirs(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "Bad_Name", str(tmp_path / "a")]) == 1
    assert "invalid kernel name 'Bad_Name'" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "file").write_text("x")
    assert main(["init", "good", str(tmp_path / "b")]) == 1
    assert "not empty" in capsys.readouterr().err


def test_init_scaffolds_a_valid_project(tmp_path: Path) -> None:
    dest = tmp_path / "my-act"
    assert main(["init", "my-act", str(dest)]) == 0
    assert (dest / "torch-ext" / "my_act" / "__init__.py").is_file()
    assert (dest / "my_act_cpu" / "my_act_cpu.cpp").is_file()
    assert (dest / "my_act_cuda" / "my_act_cuda.cu").is_file()
    binding = (dest / "torch-ext" / "torch_binding.cpp").read_text()
    assert '#include "registration.h"' in binding
    assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME" in binding
    assert "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)" in binding
    assert not (dest / "registration.h").exists()
    assert main(["check", str(dest)]) == 0
    from kernelforge.manifest import load_manifest

    m = load_manifest(dest)
    assert m.name == "my-act" and m.python_name == "my_act"
    assert set(m.backends) == {"cpu", "cuda"}


def test_publish_without_builds_explains_the_fix(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    assert main(["init", "relu", str(project)]) == 0
    proc = run_cli("publish", str(project), "--repo", "me/relu", "--hub", str(tmp_path / "hub"))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "build" in proc.stderr


@pytest.mark.slow
def test_scaffolded_project_builds_publishes_and_loads(tmp_path: Path) -> None:
    """kernelforge init -> build -> publish -> versions, then get_kernel in a fresh process."""
    project = tmp_path / "my-relu"
    hub = tmp_path / "hub"
    assert run_cli("init", "my-relu", str(project)).returncode == 0
    proc = run_cli("build", str(project), "--backend", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # progress names every source as it compiles
    assert "compiling my_relu_cpu/my_relu_cpu.cpp" in proc.stdout
    assert "compiling torch-ext/torch_binding.cpp" in proc.stdout
    proc = run_cli("publish", str(project), "--repo", "me/my-relu", "--hub", str(hub))
    assert proc.returncode == 0, proc.stderr
    assert "branch v1" in proc.stdout
    proc = run_cli("versions", "me/my-relu", "--hub", str(hub))
    assert proc.returncode == 0, proc.stderr
    assert "v1" in proc.stdout and "-cpu-" in proc.stdout
    script = (
        "import json, sys, torch\n"
        "from kernelforge import get_kernel\n"
        f"k = get_kernel('me/my-relu', backend='cpu', hub={str(hub)!r})\n"
        "x = torch.randn(1000)\n"
        "ok = bool(torch.equal(k.my_relu(x), torch.relu(x)))\n"
        "print(json.dumps({'name': k.__name__, 'ok': ok}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is True
    assert result["name"].startswith("my_relu_cpu_")
