"""The per-host agent: discovers the host's accelerators and reports them to the API.

One scan asks every enabled driver for its devices (``discovery``), merges them
into one full ``HostReport`` and sends it with ``PUT /v2/hosts/{host}/report``
(``client``). ``loop`` scans at start, every ``[agent] report_interval`` seconds
and after udev events (``udev``), and retries with backoff while the API is
away. The agent reaches the service only through the REST API.
"""
