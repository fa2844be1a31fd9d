"""`python -m mma2a.cli`."""

from . import main

main()
