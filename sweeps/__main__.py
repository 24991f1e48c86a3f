"""python -m sweeps run ... -- LOAD ARGS | python -m sweeps ab ... -- LOAD ARGS (docs/tuning.md)"""

import sys

from sweeps.cli import main

sys.exit(main())
