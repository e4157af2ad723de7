"""What ``kernelforge init`` gives a kernel author beyond a project that builds: the
guidance in its files holds when followed."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import run_cli

from kernelforge.build.plan import plan_build
from kernelforge.cli import main
from kernelforge.manifest import load_manifest


def _init(tmp_path: Path, name: str = "my-act") -> Path:
    project = tmp_path / name
    assert main(["init", name, str(project)]) == 0
    return project


def test_the_rocm_section_build_toml_shows_checks_and_plans(tmp_path: Path) -> None:
    """Following build.toml's comment (add "rocm" to backends and the section it
    describes) gives a project that check accepts and whose ROCm build compiles the CUDA
    source."""
    project = _init(tmp_path)
    toml = project / "build.toml"
    text = toml.read_text()
    comment = " ".join(re.findall(r"(?m)^# (.*)$", text))
    for said in ('add "rocm" to `backends`', "[kernel.my_act_rocm]", 'backend "rocm"',
                 "the same depends", "the CUDA source in src", "rocm-archs", "gfx942"):
        assert said in comment, (said, comment)
    text = text.replace('    "cuda",\n]', '    "cuda",\n    "rocm",\n]', 1)
    section = ('[kernel.my_act_rocm]\nbackend = "rocm"\ndepends = ["torch"]\n'
               'rocm-archs = ["gfx942"]\nsrc = ["my_act_cuda/my_act_cuda.cu"]\n')
    toml.write_text(text + "\n" + section)
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


def _pytest(project: Path) -> subprocess.CompletedProcess[str]:
    """The project's own tests, run as its README says, on the CPU alone (the project is
    built for cpu only, and a GPU here would have them load a cuda build)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests"], cwd=project, capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.slow
def test_the_generated_tests_pass_on_the_build_and_catch_a_broken_kernel(
        tmp_path: Path) -> None:
    project = _init(tmp_path)
    assert (project / "tests" / "test_my_act.py").is_file()
    assert run_cli("build", str(project), "--backend", "cpu").returncode == 0
    proc = _pytest(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b6 passed\b", proc.stdout), proc.stdout
    # a kernel that copies its input instead of clamping it fails them
    source = project / "my_act_cpu" / "my_act_cpu.cpp"
    text = source.read_text()
    assert text.count("out[i] = x < zero ? zero : x;") == 1
    source.write_text(text.replace("out[i] = x < zero ? zero : x;", "out[i] = x;"))
    assert run_cli("build", str(project), "--backend", "cpu").returncode == 0
    proc = _pytest(project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"\b5 failed\b", proc.stdout), proc.stdout


def _card_code(card: str, lang: str) -> str:
    """The card's one fenced block of ``lang``."""
    (block,) = re.findall(rf"(?ms)^```{lang}\n(.*?)^```$", card)
    return str(block)


def test_the_card_names_the_kernel_and_calls_what_the_package_exports(tmp_path: Path) -> None:
    project = _init(tmp_path, "fast-gelu")
    card = (project / "README.md").read_text()
    parts = re.fullmatch(r"---\n(.*?)\n---\n(.*)", card, re.S)
    assert parts, "the card opens with its metadata (YAML front matter)"
    front, body = parts.groups()
    from kernelforge._parse import toml_loads

    license_ = toml_loads((project / "build.toml").read_text())["general"]["license"]
    assert f"license: {license_.lower()}" in front.splitlines() and "  - kernel" in front
    assert "\n# fast-gelu\n" in body
    # repository ids keep the kernel's dashes; the function and package are fast_gelu
    assert "<org>/fast_gelu" not in card
    code = _card_code(card, "python")
    assert 'fast_gelu = get_kernel("<org>/fast-gelu", version=1)' in code
    package = ast.parse((project / "torch-ext" / "fast_gelu" / "__init__.py").read_text())
    exported = next(ast.literal_eval(n.value) for n in package.body
                    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    called = {n.func.attr for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute)
              and getattr(n.func.value, "id", "") == "fast_gelu"}
    assert called and called <= set(exported), (called, exported)
    assert "kernelforge publish . --repo <org>/fast-gelu --card README.md" in (
        _card_code(card, "bash"))


@pytest.mark.slow
def test_the_card_publishes_and_its_example_runs(tmp_path: Path) -> None:
    """The card's own commands publish it with the build, and its example loads the
    published kernel (on the CPU: only that backend is built here)."""
    project = _init(tmp_path)
    hub = tmp_path / "hub"
    assert run_cli("build", str(project), "--backend", "cpu").returncode == 0
    card = (project / "README.md").read_text()
    publish = next(shlex.split(line, comments=True) for line in
                   _card_code(card, "bash").replace("<org>", "me").splitlines()
                   if line.startswith("kernelforge publish"))
    env = dict(os.environ, KERNELFORGE_HUB=str(hub))
    proc = subprocess.run([sys.executable, "-m", "kernelforge", *publish[1:]], cwd=project,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "card: README.md (README.md on branch v1 and on branch main)" in proc.stdout
    from kernelforge.hub import LocalHub

    local = LocalHub(hub)
    main_head = local.resolve("me/my-act", "main")
    assert local.read_file("me/my-act", main_head, "README.md") == card.encode()
    code = _card_code(card, "python").replace("<org>", "me").replace(
        "version=1)", 'version=1, backend="cpu")')
    check = "\nassert torch.equal(my_act.my_act(x), torch.relu(x))\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", code + check], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "ok"
