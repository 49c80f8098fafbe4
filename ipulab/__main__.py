"""`python -m ipulab`: the same as the `ipulab` command."""
import sys

from ipulab.cli import main

sys.exit(main())
