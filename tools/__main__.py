"""`python -m tools` is the `parley` command (how the supervisor starts its children)."""

import sys

from tools.entry import main

sys.exit(main())
