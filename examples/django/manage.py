#!/usr/bin/env python
"""The example Django project: `python manage.py test`, `zsched_dispatcher`, `zsched_worker`."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exampleproj.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
