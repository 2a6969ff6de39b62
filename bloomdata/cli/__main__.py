"""``python -m bloomdata.cli COMMAND ...``: the same dispatcher as the ``bloomdata`` script."""

import sys

from bloomdata.cli import main

sys.exit(main())
