"""`python -m specviz ...`: see specviz.cli."""

import sys

from specviz.cli.main import main

sys.exit(main())
