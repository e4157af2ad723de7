"""The main job: build the bundled relu kernel, publish it to the local hub, load it back
with :func:`kernelforge.get_kernel` and check it against PyTorch, saying what it does."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from kernelforge._userdirs import user_dir

EXAMPLE = Path(__file__).with_name("examples") / "relu"
# Not a repository of the Hugging Face Hub: with no hub named, a load prefers the local hub
# when it holds the repository, and the demo's build must not stand in for a real one.
DEMO_REPO = "kernelforge-demo/relu"


def _workspace() -> Path:
    """A writable copy of the bundled project (builds never write into site-packages)."""
    return user_dir("cache", "the demo's copy of its project", "XDG_CACHE_HOME"
                    ) / "demo" / "relu"


def _sync_project(src: Path, dest: Path) -> None:
    """Copy the example's sources to ``dest``, keeping ``dest``'s build outputs."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if "__pycache__" in rel.parts or rel.parts[0] in ("build", ".kernelforge"):
            continue
        target = dest / rel
        if path.is_dir():
            target.mkdir(exist_ok=True)
        elif not target.exists() or target.read_bytes() != path.read_bytes():
            shutil.copyfile(path, target)


def run_demo(
    *,
    hub: Path | None = None,
    workspace: Path | None = None,
    say: Callable[[str], None] = print,
) -> bool:
    """Build, publish, load and check the bundled relu kernel.

    Args:
        hub: local hub directory (default: ``$KERNELFORGE_HUB`` or the user cache).
        workspace: where the project is copied and built (default: the user cache).
        say: receives what the demo does, line by line.

    Returns:
        True when every output matched ``torch.relu``.
    """
    from kernelforge.build import build_project
    from kernelforge.hub import LocalHub
    from kernelforge.hub.local import HUB_ENV
    from kernelforge.loader import get_kernel
    from kernelforge.manifest import load_manifest

    local_hub = LocalHub(hub)
    # a hub that cannot be published to fails now, not after a build of half a minute
    local_hub.check_publishable()

    project = workspace or _workspace()
    say(f"[1/4] project: bundled relu kernel (cpu + cuda sources) copied to {project}")
    _sync_project(EXAMPLE, project)

    say("[2/4] build: kernelforge build")
    t0 = time.monotonic()
    results = build_project(project, progress=lambda line: say(f"      {line}"))
    say(f"      {len(results)} variant(s) in {time.monotonic() - t0:.1f}s: "
        + ", ".join(r.variant for r in results))

    chosen = os.environ.get(HUB_ENV, "").strip()
    if hub is None and chosen.lower() in ("hf", "huggingface"):
        say(f"      note: {HUB_ENV}={chosen} is not followed: the demo publishes only to a "
            "local hub, here the default one")
    manifest = load_manifest(project)
    version = manifest.version if manifest.version is not None else 1
    rev = local_hub.publish(DEMO_REPO, project / "build", version=version, message="demo")
    held = " (unchanged: the hub held this build already)" if rev.commit == rev.parent else ""
    say(f"[3/4] publish: {DEMO_REPO} version {version} revision {rev.commit[:12]}{held} "
        f"-> {local_hub.root}")

    import torch

    say("[4/4] load and check: get_kernel, then compare with torch.relu")
    devices = ["cpu"]
    if torch.cuda.is_available():
        if any(r.backend == "cuda" for r in results):
            devices.append("cuda")
        else:
            say("      cuda: skipped (no cuda variant was built here)")
    ok = True
    for device in devices:
        t0 = time.monotonic()
        relu = get_kernel(DEMO_REPO, version=version, backend=device, hub=local_hub.root)
        where = Path(relu.__file__ or ".").parent.name
        say(f"      get_kernel({DEMO_REPO!r}, backend={device!r}) -> module {relu.__name__} "
            f"from {where} in {(time.monotonic() - t0) * 1e3:.0f} ms")
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = torch.randn(1024, 1000, device=device).to(dtype)
            got = relu.relu(x)
            want = torch.relu(x)
            same = bool(torch.equal(got, want))
            ok &= same
            say(f"      {device} {str(dtype).removeprefix('torch.'):9s} "
                f"relu(x) == torch.relu(x): {'yes' if same else 'NO'}")
    say("demo: " + ("all outputs match torch.relu" if ok else "MISMATCH against torch.relu"))
    return ok
