"""Entry point for ``python -m kubesim``."""

from kubesim.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
