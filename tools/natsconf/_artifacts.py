"""The grants on the tool runtime's artifact store (actors/tools/_artifacts.py): its writer's
and its reader's."""

from __future__ import annotations

from bus import ARTIFACTS
from tools.natsconf._grants import JS_API, Grants

__all__ = ("artifact_grants",)


def artifact_grants(g: Grants, *, write: bool) -> None:
    """The artifacts' object store: read by direct gets (its metadata by subject, its chunks
    in batches), which creates no consumer; written by the tool runtime alone, which deletes
    the chunks of a write that failed, message by message. Nobody gets its purge: that is
    stream administration, the provisioner's."""
    bucket = g.ns.bucket(ARTIFACTS)
    stream = f"OBJ_{bucket}"
    g.pub(f"{JS_API}.DIRECT.GET.{stream}", f"{JS_API}.DIRECT.GET.{stream}.>")
    if write:
        g.pub(
            f"{JS_API}.STREAM.INFO.{stream}",
            f"$O.{bucket}.C.>",
            f"$O.{bucket}.M.>",
            f"{JS_API}.STREAM.MSG.DELETE.{stream}",
        )
