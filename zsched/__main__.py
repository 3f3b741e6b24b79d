import sys

from zsched.cli.main import main

sys.exit(main())
