"""``python -m bloomtrain.cli COMMAND ...`` (what torchrun and the DeepSpeed launcher run on every rank)."""

import sys

from bloomtrain.cli import main

sys.exit(main())
