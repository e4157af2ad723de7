"""End to end against the real Hugging Face Hub (marked `network`: skipped unless
KERNELFORGE_TEST_NETWORK=1). Loads, locks and re-loads offline a public kernel, and
checks a sigstore bundle when the chosen variant has one."""

from __future__ import annotations

from pathlib import Path

import pytest
from kf_sharing import isolate

from kernelforge import loader, trust
from kernelforge.errors import TrustError, VariantNotFoundError
from kernelforge.hub.hf import HfHub
from kernelforge.lock import download_locked, lock_project

pytestmark = pytest.mark.network

REPO = "kernels-community/relu"
#: The workflow that signs kernels-community builds (the certificate identity).
WORKFLOW = ("https://github.com/huggingface/kernels-community/.github/workflows/"
            "build.yaml@refs/heads/main")


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def hf(env) -> HfHub:
    hub = HfHub(cache=env["cache"])
    try:
        loader.kernel_info(REPO, version=1, hub=hub, backend="cpu")
    except VariantNotFoundError as err:
        pytest.skip(f"{REPO} has no build for this system: {err}")
    return hub


def test_remote_load_needs_trust_and_verifies(hf: HfHub) -> None:
    info = loader.kernel_info(REPO, version=1, hub=hf, backend="cpu")
    assert info.hub == "Hugging Face Hub" and info.commit and info.branch == "v1"
    if not info.trust.startswith("trust: allowed"):
        with pytest.raises(TrustError):
            loader.get_kernel(REPO, version=1, hub=hf, backend="cpu")
    module = loader.get_kernel(REPO, version=1, hub=hf, backend="cpu", trust_remote_code=[REPO])
    assert module.__name__ == info.id


def test_sigstore_bundle_verifies_for_the_trusted_workflow(hf: HfHub) -> None:
    pytest.importorskip("sigstore")
    info = loader.kernel_info(REPO, version=1, hub=hf, backend="cpu")
    bundle = hf.read_file(REPO, info.commit or "", f"build/{info.variant}/metadata.json.sigstore")
    if bundle is None:
        pytest.skip(f"{REPO} {info.variant} carries no sigstore bundle")
    trust.add_sigstore_identity(WORKFLOW, repos=("kernels-community/*",))
    info = loader.kernel_info(REPO, version=1, hub=hf, backend="cpu")
    assert info.trust.startswith("trust: allowed, sigstore signature by"), info.trust


def test_lock_download_and_load_offline(hf: HfHub, tmp_path: Path, monkeypatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    result = lock_project(project, hub=hf, allow=[REPO])
    assert result.hf_path is not None and result.kernels[0].variants
    download_locked(result.path, hub=hf, backend="cpu")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    module = loader.load_kernel(REPO, lockfile=result.path, hub=HfHub(cache=hf.cache.root),
                                backend="cpu")
    assert module.__name__
