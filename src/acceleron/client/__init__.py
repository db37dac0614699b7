"""What every client of the Acceleron API shares: the CLI (``cli/client.py``), the agent
(``agent/client.py``), the scheduler's claims (``scheduler/claim.py``) and os_acc.

* :mod:`acceleron.client.errors`: reading an error answer (``parse_error``, ``detail``);
* :mod:`acceleron.client.arqs`: Nova's bind body and waiting for binds to end.

It imports neither FastAPI nor keystoneauth: the CLI loads it on every command.
"""
