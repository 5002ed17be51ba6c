"""`python -m rlzero`: see rlzero.cli."""

from rlzero.cli import main

main()
