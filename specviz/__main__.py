"""`python -m specviz ...`: see specviz.cli."""

import sys

from specviz.cli import main

sys.exit(main())
