"""The gemm kernel's variant table against its sources, without a compiler.

`gemm/gemm_dispatch.cu` declares each variant's launcher pair (`NAME_workspace`,
`NAME_run`) and lists them in the order of `enum class Variant`; another translation
unit defines them, by hand or through `KFGEMM_DEFINE_VARIANT`. A name that is declared
but defined nowhere compiles and fails only when the extension is imported on a GPU, so
it is checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

GEMM = Path(__file__).resolve().parents[1] / "kernels" / "gemm"
SOURCES = GEMM / "gemm"


def _declared() -> list[str]:
    text = (SOURCES / "gemm_dispatch.cu").read_text()
    return re.findall(r"^KFGEMM_DECLARE_VARIANT\((\w+)\)", text, flags=re.M)


def _table() -> list[str]:
    text = (SOURCES / "gemm_dispatch.cu").read_text()
    body = text[text.index("constexpr Entry kTable[]"):]
    body = body[: body.index("};")]
    return re.findall(r"KFGEMM_ENTRY\((\w+)\)", body)


def _enum() -> tuple[list[tuple[str, int]], int]:
    text = (SOURCES / "gemm_api.h").read_text()
    body = text[text.index("enum class Variant : int {"):]
    body = body[: body.index("};")]
    pairs = [(n, int(v)) for n, v in re.findall(r"^\s*(k\w+) = (\d+),", body, flags=re.M)]
    count = dict(pairs).pop("kCount")
    return [p for p in pairs if p[0] != "kCount"], count


def _defined() -> set[str]:
    names: set[str] = set()
    for path in SOURCES.glob("*.cu"):
        if path.name == "gemm_dispatch.cu":
            continue
        text = path.read_text()
        names.update(re.findall(r"^KFGEMM_DEFINE_VARIANT\((\w+),", text, flags=re.M))
        workspace = set(re.findall(r"^size_t (\w+)_workspace\(", text, flags=re.M))
        run = set(re.findall(r"^Status (\w+)_run\(", text, flags=re.M))
        names.update(workspace & run)
    return names


def test_every_declared_launcher_is_defined():
    declared = _declared()
    assert declared, "no KFGEMM_DECLARE_VARIANT found: the parser no longer matches the source"
    missing = [n for n in declared if n not in _defined()]
    assert not missing, f"declared in gemm_dispatch.cu but defined in no other source: {missing}"


def test_table_follows_the_enum():
    members, count = _enum()
    table = _table()
    assert sorted(_declared()) == sorted(table)
    assert [v for _, v in members] == list(range(count)), "enum values must be 0..kCount-1"
    assert len(table) == count, f"{len(table)} table entries for kCount = {count}"
    # The table is indexed by the enum's value: entry i must be the kernel enum value i
    # names (kFp8Coop128x128StreamK -> fp8_coop_128x128_streamk).
    def squash(name: str) -> str:
        return name.replace("_", "").lower()

    by_value = [squash(name[1:]) for name, _ in sorted(members, key=lambda p: p[1])]
    assert [squash(t) for t in table] == by_value, "table order differs from the enum's"


def test_variant_names_in_tests_and_docs_exist():
    """Kernel names quoted in the GPU tests and the package's docstrings are table names."""
    table = set(_table())
    quoted = set()
    for path in (Path(__file__).parent / "gpu" / "test_gemm.py",
                 GEMM / "torch-ext" / "gemm" / "__init__.py"):
        quoted.update(re.findall(r"['\"]((?:fp8|bf16)_\w+)['\"]", path.read_text()))
    assert quoted, "no kernel names found: the pattern no longer matches"
    assert not quoted - table, f"names not in the variant table: {sorted(quoted - table)}"
