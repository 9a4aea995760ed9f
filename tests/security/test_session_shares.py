"""One person's sessions cannot fill the bucket every session needs (a storage review).

The router alone writes `sessions`, for everyone, and keeps an ended session 30 days: one
person opening sessions with large goals at their rate limit filled the default bucket in about
three minutes, and then nobody's session could open or end. Each session's bytes are charged
to the person who opened it now, and past their share a new session is refused
`RATE_LIMITED`, naming the share and when its oldest bytes expire, while another person's
sessions open as ever.

The share is one byte here, so `cli`'s first session uses it up: it runs to its end (a session
open goes on), `cli`'s second is refused, and `person-alice`'s runs. Every process is real,
under the least-privilege broker config, each its own user.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.security.test_two_people import ALICE, two_people  # noqa: F401 - the fixture
from tests.support.lockdown import LockedDown
from tests.support.processes import parley_env
from tests.support.system import finished, parley_cli, running_locked_system
from tools.demo import DEMO_GOAL

_ONE_BYTE = json.dumps({"session_bytes_per_person": 1})


async def test_past_a_persons_share_their_sessions_are_refused_and_others_open(
    two_people: LockedDown,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    locked, ns = two_people, two_people.ns
    async with running_locked_system(locked, tmp_path / "keys", quotas=_ONE_BYTE) as system:
        env = parley_env(locked.server.url, ns.root)

        def collab(who: str) -> list[str]:
            return ["collab", "--config", str(locked.settings_file(who)), DEMO_GOAL]

        code, lines = await finished(parley_cli(env, *collab("cli")), 120)
        assert code == 0 and any("final" in line for line in lines), lines

        code, lines = await finished(parley_cli(env, *collab("cli")), 120)
        said = "\n".join(lines)
        assert code != 0 and "RATE_LIMITED" in said, said
        assert "the sessions bucket keeps" in said and "person cli" in said, said
        assert "session_bytes_per_person" in said, said

        code, lines = await finished(parley_cli(env, *collab(ALICE)), 120)
        assert code == 0 and any("final" in line for line in lines), lines
        router = "\n".join(system.processes["router"].lines)
        assert "could not charge" not in router, router
