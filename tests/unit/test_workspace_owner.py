"""Whose a session's workspace is (actors/tools/_workspace_owner.py), and the console's patch
preview of it shown to that person only (actors/console/_task_rpc.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from actors.console._rpc_errors import RpcError
from actors.console._task_rpc import patch_preview_of
from actors.console._timeline import SessionRecord
from actors.tools._workspace_owner import claim_workspace, workspace_owner


def test_the_first_claim_holds_and_only_its_owner_is_let_in(tmp_path: Path) -> None:
    assert workspace_owner(tmp_path, "s1") is None
    assert claim_workspace(tmp_path, "s1", "person-alice") is None
    assert claim_workspace(tmp_path, "s1", "person-alice") is None  # hers, again
    assert claim_workspace(tmp_path, "s1", "person-bob") == "person-alice"
    assert workspace_owner(tmp_path, "s1") == "person-alice"
    assert claim_workspace(tmp_path, "s2", "person-bob") is None  # his own session
    # Nothing of a claim's writing is left aside, and the workspaces hold only the claims.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s1.owner", "s2.owner"]


async def test_another_persons_preview_is_refused_as_an_unknown_session(tmp_path: Path) -> None:
    """Bob's console keeps a record of any session id his timeline names; the workspace of
    that id is alice's, and his preview of it is refused like an id that never existed."""
    claim_workspace(tmp_path, "s1", "person-alice")
    record = SessionRecord(session_id="s1", created_at=datetime.now(UTC))
    with pytest.raises(RpcError) as refused:
        await patch_preview_of(tmp_path, record, "person-bob")
    assert refused.value.data is not None
    assert refused.value.data["code"] == "SESSION_NOT_FOUND"
    hers = await patch_preview_of(tmp_path, record, "person-alice")
    assert hers["patch"] == ""  # no step checkpointed anything yet
