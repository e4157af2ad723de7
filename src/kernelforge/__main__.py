"""``python -m kernelforge``, and the ``kernelforge`` command (``[project.scripts]``)."""

import sys


def main() -> int:
    """Run the command line. A Ctrl-C before the command runs (while its modules are
    imported and its arguments read) ends it as one later does: ``interrupted``, exit
    130, no traceback."""
    try:
        from kernelforge.cli import main as run

        return run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
