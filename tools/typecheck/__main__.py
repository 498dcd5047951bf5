import sys

from tools.typecheck.ratchet import main

sys.exit(main())
