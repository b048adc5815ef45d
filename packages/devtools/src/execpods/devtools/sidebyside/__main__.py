"""``python -m execpods.devtools.sidebyside``: see `harness`."""

import sys

from execpods.devtools.sidebyside.harness import main

sys.exit(main())
