"""The client of the Acceleron API that every caller uses: the CLI (``cli/client.py``),
the agent (``agent/client.py``), the scheduler (``scheduler/claim.py``, Nova's weigher in
``scheduler/functions.py``) and os_acc, each with a thin wrapper in its own words.

* :mod:`acceleron.client.http`: ``AcceleronClient``, the HTTP calls themselves (API root,
  microversion, timeouts, failures as ``CallFailed`` and ``ApiError``);
* :mod:`acceleron.client.plain`: the calls without Keystone, on the standard library;
* :mod:`acceleron.client.errors`: reading an error answer (``parse_error``, ``detail``);
* :mod:`acceleron.client.arqs`: Nova's bind body and waiting for binds to end.

It imports no FastAPI, and keystoneauth only when a call with Keystone is made: the CLI
loads it on every command.
"""
