"""Test tiers: the default run needs no GPU and no network. Tests marked `cuda`, `sm90`
or `network` skip with the reason when their need is absent (`slow` tests always run)."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

import pytest
from kf_testutil import copy_example


@functools.lru_cache(maxsize=None)
def _cuda_capability() -> tuple[int, int] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or torch.version.cuda is None:
        return None
    return torch.cuda.get_device_capability()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "network" in item.keywords and os.environ.get("KERNELFORGE_TEST_NETWORK") != "1":
            item.add_marker(pytest.mark.skip(
                reason="needs the network; set KERNELFORGE_TEST_NETWORK=1 to run"))
        if "cuda" in item.keywords or "sm90" in item.keywords:
            cap = _cuda_capability()
            if cap is None:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU and a CUDA torch"))
            elif "sm90" in item.keywords and cap != (9, 0):
                item.add_marker(pytest.mark.skip(
                    reason=f"needs a Hopper GPU (sm_90); this one is sm_{cap[0]}{cap[1]}"))


@pytest.fixture(autouse=True)
def private_user_dirs(tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test (and the processes it starts) out of the user's real hub, trust
    store and publisher key."""
    base = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(base / "config"))
    monkeypatch.setenv("KERNELFORGE_HUB", str(base / "hub"))


@pytest.fixture
def cpu_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """Present this process as a CPU-only one to the loader, for tests that choose among
    cpu builds (a CUDA torch rejects `torch-cpu` unless backend="cpu" is asked for), so
    they hold on a GPU machine too. Processes a test starts see the real system."""
    from kernelforge import variants

    real = variants.detect_system()
    if real.backend != "cpu":
        facts = dataclasses.replace(real, backend="cpu", backend_version=None, gpu_archs=())
        monkeypatch.setattr(variants, "detect_system", lambda: facts)


@pytest.fixture(scope="session")
def built_relu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled relu project, built once per test session for the cpu backend."""
    from kernelforge.build import build_project

    project = copy_example(tmp_path_factory.mktemp("relu") / "relu")
    lines: list[str] = []
    results = build_project(project, backends=["cpu"], progress=lines.append)
    assert len(results) == 1 and not results[0].up_to_date
    assert any("] compiled relu_cpu/" in line for line in lines), lines
    return project


@pytest.fixture
def unbuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A project `kernelforge init` made (kernel k-one), not built yet; what init printed
    is read away."""
    from kernelforge.cli import main

    project = tmp_path / "k"
    assert main(["init", "k-one", str(project)]) == 0
    capsys.readouterr()
    return project


@pytest.fixture
def remote(tmp_path: Path) -> Any:
    """An in-memory Hugging Face Hub (``kf_sharing.FakeHfApi``) for the Hub's tests."""
    from kf_sharing import FakeHfApi

    return FakeHfApi(tmp_path / "remote")


@pytest.fixture
def hf(remote: Any, env: dict[str, Path]) -> Any:
    """A :class:`~kernelforge.hub.hf.HfHub` on :func:`remote`, caching in the module's
    ``env`` (the test module's fixture that ``kf_sharing.isolate`` makes)."""
    from kernelforge.hub.hf import HfHub

    return HfHub(api=remote, cache=env["cache"])
