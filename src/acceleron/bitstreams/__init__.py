"""Bitstream stores: Glance for clouds, a local content-addressed store for embedded use.

Both sit behind ``BitstreamStore`` and answer the same look-ups (by bitstream
id, by bitstream name, by function id or function name plus region type);
more than one match is an error that lists the matches. Bytes are handed out
only after their hash is verified, and ``fetch_to_cache`` keeps a verified copy
per host. ``factory.from_conf`` builds the store ``[bitstreams] backend`` names.
"""

from __future__ import annotations

from acceleron.bitstreams.model import Bitstream, NewBitstream, Query

# The stores (and the database layer the local one needs) are imported where they are
# used: acceleron.bitstreams.factory.from_conf builds the configured one. An agent only
# moves bytes (acceleron.bitstreams.transfer) and needs neither.
__all__ = ["Bitstream", "NewBitstream", "Query"]
