"""benchmarks/community_tests.py: a kernel project's own tests run against its build,
loaded by kernelforge or by Hugging Face's ``kernels``, with the tests' Hub lookups
answered from that build."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kf_testutil import REPO, write_noarch_project

from kernelforge.build import build_project

RUNNER = REPO / "benchmarks" / "community_tests.py"

#: The three ways kernels-community tests reach the kernel.
PROJECT_TESTS = textwrap.dedent("""\
    from pathlib import Path

    import kernels
    import sq

    def test_imported_by_name():
        assert sq.square(3) == 9

    def test_from_the_hub():
        assert kernels.get_kernel("kernels-community/sq", version=1).square(4) == 16

    def test_from_the_project_folder():
        here = Path(__file__).resolve().parents[1]
        assert kernels.get_local_kernel(here).square(5) == 25
        assert kernels.get_local_kernel(here, backend="cpu").square(6) == 36

    def test_planted_failure():
        assert sq.square(2) == {expected}
    """)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = write_noarch_project(tmp_path / "sq", "sq")
    (root / "torch-ext" / "sq" / "__init__.py").write_text(
        "def square(x):\n    return x * x\n")
    build_project(root, progress=lambda _: None)
    (root / "tests").mkdir()
    return root


def run(loader: str, project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUNNER), loader, str(project), "tests", "-q"],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("loader", ["kernelforge", "kernels"])
def test_the_project_tests_pass_and_fail_as_written(project: Path, loader: str) -> None:
    if loader == "kernels":
        pytest.importorskip("kernels", reason="needs PyPI kernels")
    (project / "tests" / "test_sq.py").write_text(PROJECT_TESTS.format(expected=4))
    done = run(loader, project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    assert f"{loader}: sq as _sq_" in done.stdout
    (project / "tests" / "test_sq.py").write_text(PROJECT_TESTS.format(expected=5))
    done = run(loader, project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 3 passed" in done.stdout


def test_an_unknown_loader_is_refused(project: Path) -> None:
    done = run("nix", project)
    assert done.returncode == 2 and "Usage:" in done.stderr
