"""``python -m kernelforge``: the same as the ``kernelforge`` command."""

import sys

from kernelforge.cli import main

sys.exit(main())
