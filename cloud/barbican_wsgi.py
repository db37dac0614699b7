"""Barbican's API application for the reference cloud's WSGI runner (run with Barbican's
own virtualenv's Python: ``wsgi_runner.py barbican_wsgi:application PORT``).

Barbican reads its configuration only from the default places, once per plugin module
(``~/barbican.conf`` among them), and its own WSGI module reads its paste pipeline from
/etc/barbican: the launcher runs it with ``HOME`` set to the directory of the cloud's
barbican.conf, and this module loads the paste pipeline from there too. Barbican is
imported by name: it is not in Acceleron's virtualenv.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

_deploy = importlib.import_module("paste.deploy")
application: Any = _deploy.loadapp(f"config:{Path.home() / 'barbican-api-paste.ini'}")
