"""python -m reports build RUN_DIR | show RUN_DIR | compare BASE NEW [--fail-on RULES] [--out DIR]"""

import sys

from reports.cli import main

sys.exit(main())
