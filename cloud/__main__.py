import sys

from cloud.launcher import main

sys.exit(main())
