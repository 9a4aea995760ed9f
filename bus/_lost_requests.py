"""nats-py's own requests in flight when the connection dropped fail as soon as it is back.

Beside the inbox its stores and acks are answered on (bus/_ackinbox.py, `PublishLost`), an
actor asks the server through nats-py itself: key-value reads and writes (the router's
sessions, the registry), stream and consumer info, direct gets. nats-py answers them all on
one response inbox, a future per request, and a request whose answer, or which itself, went
with the connection gets none: a server killed and started again knows nothing of it. Each
used to wait out its whole timeout (a key-value read: 5 s) after the server was back, so a
router with a session read in flight stood still that long, and a session's next turn with it.

Those in flight when the link went down are failed once it is back, with nats-py's own
`TimeoutError` (nats-py turns any timeout-like failure of a request into one): it means what
a timeout does, no answer will come, and callers already ask again on one
(bus/_elections.py `through_elections`), only now at once. What is requested while the link
is down waits in nats-py's buffer, goes out on the reconnect, and is answered as usual.

It reads nats-py's map of requests awaiting answers (`Client._resp_map`, nats-py 2.x), which
has no public accessor; `tests/integration/test_ackinbox_outage.py` fails if that changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import nats.errors
from nats.aio.client import Client as NATS

if TYPE_CHECKING:
    from bus._connection import Link

__all__ = ("fail_lost_requests",)


def fail_lost_requests(nc: NATS, link: Link) -> None:
    """Fail the requests `nc` has in flight each time `link` drops, once it is back."""
    in_flight: set[str] = set()

    def dropped() -> None:
        in_flight.update(nc._resp_map)

    def back() -> None:
        for token in in_flight:
            future = nc._resp_map.get(token)
            if future is not None and not future.done():
                future.set_exception(nats.errors.TimeoutError())
        in_flight.clear()

    link.watch(dropped)
    link.watch_back(back)
