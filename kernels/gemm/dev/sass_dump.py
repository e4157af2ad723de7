"""Writes the SASS of the kernels whose mangled names match a pattern, from a built
extension, to a gzipped text file (cuobjdump must be on PATH).

    python kernels/gemm/dev/sass_dump.py EXTENSION.so OUT.txt.gz 3CvtE2E 3CvtE1E
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys


def main() -> int:
    so, out, *patterns = sys.argv[1:]
    text = subprocess.run(["cuobjdump", "-sass", so], capture_output=True, text=True,
                          check=True).stdout
    parts = re.split(r"(?=\n\s*Function : )", text)
    keep = [p for p in parts if any(pat in p.split("\n", 2)[1] for pat in patterns)]
    with gzip.open(out, "wt") as f:
        f.write("".join(keep))
    print(f"{len(keep)} functions of {len(parts) - 1} written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
