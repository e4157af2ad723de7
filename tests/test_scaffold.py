"""What ``kernelforge init`` gives a kernel author beyond a project that builds: the
guidance in its files holds when followed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelforge.build.plan import plan_build
from kernelforge.cli import main
from kernelforge.manifest import load_manifest

pytestmark = pytest.mark.filterwarnings("error")


def _init(tmp_path: Path, name: str = "my-act") -> Path:
    project = tmp_path / name
    assert main(["init", name, str(project)]) == 0
    return project


def test_the_rocm_section_build_toml_shows_checks_and_plans(tmp_path: Path) -> None:
    """Following build.toml's comment (uncomment the section, add "rocm" to backends)
    gives a project that check accepts and whose ROCm build compiles the CUDA source."""
    project = _init(tmp_path)
    toml = project / "build.toml"
    text = toml.read_text()
    shown = re.findall(r"(?m)^#   (.*)$", text)
    assert shown[0] == "[kernel.my_act_rocm]", shown
    text = text.replace('    "cuda",\n]', '    "cuda",\n    "rocm",\n]', 1)
    toml.write_text(text + "\n" + "\n".join(shown) + "\n")
    assert main(["check", str(project)]) == 0
    m = load_manifest(project)
    assert "rocm" in m.backends
    kernel = m.kernels["my_act_rocm"]
    assert kernel.backend == "rocm" and kernel.rocm_archs == ("gfx942",)
    from test_build_plan import GCC, HIPCC, SID

    plan = plan_build(m, backend="rocm", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=HIPCC)
    groups = {g.name: [p.relative_to(project).as_posix() for p in g.sources]
              for g in plan.groups}
    assert groups == {"my_act_rocm": ["my_act_cuda/my_act_cuda.cu"]}, groups
    assert "--offload-arch=gfx942" in plan.groups[0].device_flags, plan.groups[0]


@pytest.mark.parametrize(("define", "key"), [
    ("CPU_KERNEL", "at::kCPU"), ("CUDA_KERNEL", "at::kCUDA"), ("ROCM_KERNEL", "at::kCUDA"),
])
def test_the_binding_registers_the_op_for_each_backend_it_builds(
        tmp_path: Path, define: str, key: str) -> None:
    """The define each backend's build sets picks an implementation: a ROCm build (whose
    torch dispatches AMD GPU tensors under the CUDA key) registers one as CUDA does,
    rather than an op that no tensor can run."""
    cpp = shutil.which("cpp")
    if cpp is None:
        pytest.skip("needs the C preprocessor (cpp)")
    project = _init(tmp_path)
    stubs = tmp_path / "stubs"  # the headers the binding includes, empty
    for rel in ("torch/library.h", "ATen/core/Tensor.h", "registration.h"):
        (stubs / rel).parent.mkdir(parents=True, exist_ok=True)
        (stubs / rel).write_text("")
    out = subprocess.run([cpp, "-P", f"-D{define}", "-I", str(stubs),
                          str(project / "torch-ext" / "torch_binding.cpp")],
                         capture_output=True, text=True, check=True).stdout
    impls = re.findall(r'ops\.impl\("my_act", (\S+),', out)
    assert impls == [key], out
