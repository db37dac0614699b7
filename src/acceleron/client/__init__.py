"""The client of the Acceleron API that every caller uses: the CLI (``cli/client.py``),
the agent (``agent/client.py``), claims without Nova (``client/claims.py``), Nova's
weigher (``scheduler/functions.py``) and os_acc, each with a thin wrapper in its own
words.

* :mod:`acceleron.client.http`: ``AcceleronClient``, the HTTP calls themselves (API root,
  microversion, timeouts, failures as ``CallFailed`` and ``ApiError``);
* :mod:`acceleron.client.plain`: the calls without Keystone, on the standard library;
* :mod:`acceleron.client.errors`: reading an error answer (``parse_error``, ``detail``);
* :mod:`acceleron.client.arqs`: Nova's bind body and waiting for binds to end.
* :mod:`acceleron.client.claims`: ``Claimer``, a claim without Nova followed until bound,
  and its release (``acceleron claim``, ``acceleron release``).

It imports no FastAPI, and keystoneauth only when a call with Keystone is made: the CLI
loads it on every command.
"""
