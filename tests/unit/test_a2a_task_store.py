"""The A2A edge's task store keeps each client's tasks bounded (actors/a2a/_tasks.py), with
the `a2a-sdk`'s own task, context and user types: a client that opens tasks without end
drops its own oldest, never another client's, and its memory stays within its bounds."""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.routes.common import StarletteUser
from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus
from starlette.authentication import SimpleUser

from actors.a2a._tasks import BoundedTaskStore


def _as(client: str) -> ServerCallContext:
    """The context the SDK builds for a request the edge authenticated as `client`."""
    return ServerCallContext(user=StarletteUser(SimpleUser(client)))


def _task(
    task_id: str, text: str = "hello", state: TaskState = TaskState.TASK_STATE_COMPLETED
) -> Task:
    message = Message(role=Role.ROLE_USER, parts=[Part(text=text)], message_id=f"m-{task_id}")
    return Task(id=task_id, context_id="c", status=TaskStatus(state=state), history=[message])


async def test_a_client_keeps_at_most_its_bound_and_loses_its_oldest_first() -> None:
    store = BoundedTaskStore(max_tasks=3, max_bytes=1 << 20)
    alice, bob = _as("alice"), _as("bob")
    await store.save(_task("bob-1"), bob)
    for n in range(10):
        await store.save(_task(f"a{n}"), alice)
    assert store.kept("alice")[0] == 3
    assert [await store.get(f"a{n}", alice) is not None for n in range(10)] == [False] * 7 + [
        True
    ] * 3
    assert await store.get("bob-1", bob) is not None, "another client's task was dropped"
    assert await store.get("bob-1", alice) is None, "a client read another's task"


async def test_a_task_saved_again_is_kept_as_the_newest() -> None:
    store = BoundedTaskStore(max_tasks=2, max_bytes=1 << 20)
    alice = _as("alice")
    await store.save(_task("working"), alice)
    await store.save(_task("done"), alice)
    await store.save(_task("working", "an update"), alice)  # each update of a task saves it
    await store.save(_task("next"), alice)
    assert await store.get("working", alice) is not None
    assert await store.get("done", alice) is None


async def test_the_bytes_a_client_keeps_are_bounded_too() -> None:
    store = BoundedTaskStore(max_tasks=1000, max_bytes=10_000)
    alice = _as("alice")
    for n in range(50):
        await store.save(_task(f"t{n}", "x" * 1000), alice)
    count, size = store.kept("alice")
    assert size <= 10_000 and 1 < count < 50
    huge = _task("huge", "y" * 50_000)  # larger than the bound alone: kept, the rest dropped
    await store.save(huge, alice)
    assert store.kept("alice")[0] == 1 and await store.get("huge", alice) == huge


async def test_a_deleted_task_frees_its_place() -> None:
    store = BoundedTaskStore(max_tasks=2, max_bytes=1 << 20)
    alice = _as("alice")
    await store.save(_task("a"), alice)
    await store.delete("a", alice)
    assert store.kept("alice") == (0, 0)


async def test_a_task_still_worked_on_outlasts_newer_ended_ones() -> None:
    """A long session saved once, then quiet, is the oldest save: dropping it would answer its
    client "task not found" for its own running task, and refuse its cancel."""
    store = BoundedTaskStore(max_tasks=3, max_bytes=1 << 20)
    alice = _as("alice")
    await store.save(_task("long", state=TaskState.TASK_STATE_WORKING), alice)
    for n in range(20):
        await store.save(_task(f"short{n}"), alice)
    assert await store.get("long", alice) is not None
    assert store.kept("alice")[0] == 3
    # With nothing ended left to drop, the bound still holds: the oldest running one goes.
    for n in range(3):
        await store.save(_task(f"run{n}", state=TaskState.TASK_STATE_WORKING), alice)
    assert store.kept("alice")[0] == 3 and await store.get("long", alice) is None
