"""The A2A edge's task store: each client's tasks kept in memory, bounded per client.

The `a2a-sdk` keeps every task an agent was given (its status and history) for `GetTask`
and `ListTasks`, under its caller's name; its `InMemoryTaskStore` keeps them for ever. Any
holder of a bearer token can open tasks as fast as the gate admits them, so an unbounded
store would let one client fill the edge's memory. Parley's record of a task is its session
(the timeline, the audit), which outlives it here; what the edge keeps is a convenience for
the client that asked. So each client keeps at most `max_tasks` tasks and `max_bytes` of
them (their encoded size), across every agent the edge serves (one store serves them all;
task ids are unique, and each task is found only under its own client): past either, the
ended task saved longest ago is dropped, and asking for it is answered "task not found", as
for one that never existed. A task still being worked on (submitted, working, waiting for
input) is dropped only when the client has no ended task left to drop: the SDK holds a
running task in memory anyway, and a client waiting on a long session can still read and
cancel it while it opens many short ones.

One client's tasks never push out another's: each is bounded on its own (the clients are the
tokens an operator issued, `parley a2a token`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState

__all__ = ("BoundedTaskStore",)


_ENDED: Final = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
"""The states a task never leaves: what is dropped first."""


class _Kept:
    """One client's task ids, saved longest ago first, with each one's encoded size, and
    which of them have ended."""

    def __init__(self) -> None:
        self.sizes: OrderedDict[str, int] = OrderedDict()
        self.ended: set[str] = set()
        self.total = 0

    def saved(self, task_id: str, size: int, ended: bool) -> None:
        self.total += size - self.sizes.pop(task_id, 0)
        self.sizes[task_id] = size
        if ended:
            self.ended.add(task_id)
        else:
            self.ended.discard(task_id)

    def forget(self, task_id: str) -> None:
        self.total -= self.sizes.pop(task_id, 0)
        self.ended.discard(task_id)

    def oldest_to_drop(self, keep: str) -> str:
        """The ended task saved longest ago, else the task saved longest ago; never `keep`."""
        candidates = [task_id for task_id in self.sizes if task_id != keep]
        return next((t for t in candidates if t in self.ended), candidates[0])


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory store, with at most `max_tasks` tasks and `max_bytes` of them per
    client; the oldest saved are dropped first (never the one being saved)."""

    def __init__(
        self, max_tasks: int, max_bytes: int, owner_resolver: OwnerResolver = resolve_user_scope
    ) -> None:
        self._tasks = InMemoryTaskStore(owner_resolver=owner_resolver)
        self._owner_of = owner_resolver
        self._max_tasks = max_tasks
        self._max_bytes = max_bytes
        self._kept: dict[str, _Kept] = {}

    def kept(self, owner: str) -> tuple[int, int]:
        """How many tasks `owner` has here, and their encoded bytes."""
        kept = self._kept.get(owner)
        return (len(kept.sizes), kept.total) if kept is not None else (0, 0)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._tasks.save(task, context)
        owner = self._owner_of(context)
        kept = self._kept.setdefault(owner, _Kept())
        kept.saved(task.id, task.ByteSize(), task.status.state in _ENDED)
        while len(kept.sizes) > 1 and (
            len(kept.sizes) > self._max_tasks or kept.total > self._max_bytes
        ):
            dropped = kept.oldest_to_drop(task.id)
            kept.forget(dropped)
            await self._tasks.delete(dropped, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._tasks.delete(task_id, context)
        owner = self._owner_of(context)
        kept = self._kept.get(owner)
        if kept is not None:
            kept.forget(task_id)
            if not kept.sizes:
                del self._kept[owner]
