"""``python -m specviz.gpucheck``: see scripts/gpu_check.sh."""

import sys

from specviz.gpucheck.report import main

sys.exit(main())
