"""`parley delegate`: a person hands a task to an agent, or to several at once (seed 003).

`parley delegate @coder "objective"` is seed 003's simple mode with the person as the
delegator; `--fan-out @a,@b,@c` is its parallel mode, one request per agent sent at once and
every answer gathered. (The sequential chain is an agent's to run: a planner hands one
specialist's result to the next, see deploy/topologies/delegation.toml.)

Each request is a `delegation_request` the person submits as a root (its trace is its own id),
so the gate applies the person's policy profile to it: `start_traces`, the target in
`allowed_targets`, the token budget, the deadline cap. The answer, a `delegation_response` or
an `error` about the request (the agent failed, or the gate refused it), comes back on the
person's own deliver subject, read through the durable named after the person that `parley up`
provisions. A durable, not a live subscription, because an answer written while the command
is between fetches must still be there when it looks.

The command waits for each answer until the request's deadline plus `_MARGIN_S` (the answer
still has to cross the gate), then reports seed 003's "Delegation timeout after Nms". An
answer that arrives later, or answers a request this command did not make, is acknowledged and
dropped by whichever `parley delegate` reads it next: the person's durable is one queue, so
two commands run at once by the same person would take each other's answers.

A lost connection ends the wait within seconds (tools/_waiting.py, docs/cli.md). There is
nothing to cancel: each request carries its deadline, and an answer past it is dropped.
`--detach` submits the requests and waits for none of the answers (`parley calls SESSION`
lists them).

Exit codes: 0 every answer succeeded, 1 one was partial, failed, refused or late, 2 the
arguments (or the configuration) are invalid, 3 NATS cannot be reached (or was lost), 130
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from actors.delegation import (
    Delegate,
    aggregate_status,
    request_envelope,
)
from bus import (
    ConfigError,
    Input,
    Settings,
    TraceHeaders,
    consumer_config,
    jetstream,
    trace_publish,
)
from schemas import (
    DelegationConstraints,
    DelegationRequest,
    Namespace,
    SubjectTokenError,
    check_token,
    encode,
    hop_delta_for,
    new_id,
)
from tools._delegation_answers import (
    Outcome,
    Pending,
    answer_in,
    render,
    timeout_outcome,
)
from tools._local import PERSON, local_settings
from tools._trace_keys import remember_trace
from tools._waiting import (
    EXIT_LOST,
    ConnectionLost,
    Watch,
    connect_watched,
    lost_line,
    run_command,
    waited,
)

__all__ = ("Outcome", "add_delegate_command", "check_arguments", "gather", "render")

_DEFAULTS: Final = DelegationConstraints()


async def _inbox(
    js: JetStreamContext, ns: Namespace, person: str, settings: Settings
) -> JetStreamContext.PullSubscription:
    """The person's durable on the deliver stream: created here on an open broker, bound to
    the one `parley up` (or `parley provision`) made when the person may not create it.

    Raises:
        ConfigError: the person may not create it and nobody provisioned it.
    """
    spec = Input.deliver(ns, person)
    if settings.create_consumers:
        await js.add_consumer(spec.stream, consumer_config(spec, settings))
    else:
        try:
            await js.consumer_info(spec.stream, spec.durable)
        except NotFoundError:
            raise ConfigError(
                f"{person} has no consumer {spec.durable} on {spec.stream} to read answers from, "
                "and may not create one: `parley up` provisions it, or run `parley provision` "
                f"with {person}'s settings"
            ) from None
    return await js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)


async def gather(
    js: JetStreamContext,
    ns: Namespace,
    person: str,
    requests: Sequence[DelegationRequest],
    inbox: JetStreamContext.PullSubscription,
    *,
    out: TextIO,
    watch: Watch | None = None,
) -> list[Outcome]:
    """Submit every request at once as `person`, then print each answer as it comes, or its
    timeout once its deadline (plus the margin) has passed; the outcomes in arrival order. A
    `watch` ends the wait with `ConnectionLost` as soon as the connection is lost."""
    loop = asyncio.get_running_loop()
    pending = {
        request.id: Pending(request.target_employee, request.constraints.deadline_ms, loop.time())
        for request in requests
    }
    await waited(_submit_all(js, ns, person, requests, out), None, watch)
    outcomes: list[Outcome] = []

    def settle(outcome: Outcome, request_id: str) -> None:
        del pending[request_id]
        outcomes.append(outcome)
        print(render(outcome), file=out, flush=True)

    while pending:
        now = loop.time()
        for request_id, waiting in list(pending.items()):
            if now >= waiting.due:
                settle(timeout_outcome(request_id, waiting), request_id)
        if not pending:
            break
        due = min(waiting.due for waiting in pending.values())
        try:
            # One at a time: nats-py's fetch of several can hold an answer back until its
            # timeout (a late status taken for the next fetch's; docs/benchmarks.md).
            messages = await waited(inbox.fetch(1, timeout=max(due - now, 0.05)), None, watch)
        except TimeoutError:
            continue
        for msg in messages:
            found = answer_in(msg, pending, loop.time())
            if found is not None:
                settle(*found)
            await msg.ack()  # ours, late, or another command's: read once either way
    return outcomes


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the command line asks for, checked."""

    targets: tuple[str, ...]
    objective: str
    fan_out: bool


def _agent(word: str, where: str) -> str:
    """An `@name` from the command line, or ValueError saying what is wrong with it."""
    if not word.startswith("@"):
        raise ValueError(f"{where}: name agents as @name, got {word!r}")
    try:
        return check_token(word[1:], "agent name")
    except SubjectTokenError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _plan(args: argparse.Namespace) -> _Plan:
    """The targets and objective of a command line, or ValueError with what to fix."""
    words: list[str] = list(args.words)
    if args.fan_out is not None:
        targets = tuple(_agent(w.strip(), "--fan-out") for w in args.fan_out.split(","))
        twice = sorted({t for t in targets if targets.count(t) > 1})
        if twice:
            raise ValueError(f"--fan-out names {', '.join('@' + t for t in twice)} twice")
        if words and words[0].startswith("@"):
            raise ValueError("name the agents either with --fan-out or as the first word, not both")
    elif not words or not words[0].startswith("@"):
        raise ValueError(
            'no agent: parley delegate @agent "objective" (or --fan-out @a,@b,@c "objective")'
        )
    else:
        targets = (_agent(words.pop(0), "agent"),)
    objective = " ".join(words).strip()
    if not objective:
        raise ValueError("no objective: say what the agent should do")
    for flag, value in (("--deadline-ms", args.deadline_ms), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    return _Plan(targets, objective, args.fan_out is not None)


def _requests(plan: _Plan, args: argparse.Namespace, person: str) -> list[DelegationRequest]:
    """One request per target, all in one parent session: one task, from the person's side."""
    session = new_id()
    requests = []
    for target in plan.targets:
        envelope_id = new_id()
        delegate = Delegate(
            request_id=envelope_id,
            target_employee=target,
            objective=plan.objective,
            input=args.input,
            max_tokens=args.max_tokens,
            deadline_ms=args.deadline_ms,
        )
        envelope = request_envelope(
            delegate,
            envelope_id=envelope_id,
            sender=person,
            user_id=args.user,
            session_id=session,
            depth=0,
        )
        assert isinstance(envelope, DelegationRequest)  # noqa: S101 - a Delegate makes one
        requests.append(envelope)
    return requests


def check_arguments(args: argparse.Namespace) -> str | None:
    """Why the command line cannot make valid requests, or None: checked before connecting."""
    try:
        plan = _plan(args)
        for request in _requests(plan, args, PERSON):  # what the gate would dead-letter
            msgspec.json.decode(encode(request), type=DelegationRequest)
    except ValueError as exc:  # msgspec.ValidationError is one
        return str(exc)
    return None


async def _run(args: argparse.Namespace) -> int:
    settings = local_settings(args.config, PERSON)
    ns = Namespace(settings.namespace)
    person = settings.actor_id or PERSON  # one person, one principal (its own settings)
    plan = _plan(args)
    requests = _requests(plan, args, person)
    session = requests[0].parent_session_id
    nc, watch = await connect_watched(settings, person)
    try:
        js = jetstream(nc, settings)
        if args.detach:
            await waited(_submit_all(js, ns, person, requests, sys.stdout), None, watch)
            print(
                f"delegated (session {session}); each request ends by its deadline "
                f"({args.deadline_ms} ms): `parley calls {session}` lists their answers",
                flush=True,
            )
            return 0
        inbox = await waited(_inbox(js, ns, person, settings), None, watch)
        outcomes = await gather(js, ns, person, requests, inbox, out=sys.stdout, watch=watch)
    except ConnectionLost as lost:
        print(
            f"{lost_line(lost.url, None)} the requests may still be answered: once the server "
            f"is back, `parley calls {session}` lists them",
            flush=True,
        )
        return EXIT_LOST
    finally:
        await watch.close(nc)
    status = aggregate_status([outcome.result for outcome in outcomes])
    if plan.fan_out:
        won = sum(outcome.result.status == "success" for outcome in outcomes)
        print(f"fan-out: {status} ({won} of {len(outcomes)} succeeded)", flush=True)
    return 0 if status == "success" else 1


async def _submit_all(
    js: JetStreamContext,
    ns: Namespace,
    person: str,
    requests: Sequence[DelegationRequest],
    out: TextIO,
) -> None:
    """Submit every request at once as `person`, each a root (its trace is its own id). Sent
    together: one by one, a first answer could beat the last request to a limit."""
    stores = []
    for request in requests:
        print(f"{person} delegating to {request.target_employee}: {request.objective}", file=out)
        position = TraceHeaders(
            trace_id=request.id, hop_count=hop_delta_for(request), origin=person
        )
        headers = position.to_headers(request.id)
        payload = encode(request)
        trace_publish(ns.submit(person), payload, headers)  # a trace's root, when tracing
        stores.append(js.publish(ns.submit(person), payload, headers=headers))
    await asyncio.gather(*stores)
    if requests:
        remember_trace(requests[-1].id)  # `parley trace last`, `parley calls last`
    out.flush()


def _command(args: argparse.Namespace) -> int:
    problem = check_arguments(args)
    if problem is not None:
        print(f"parley delegate: {problem}", file=sys.stderr)
        return 2
    try:
        return run_command("delegate", lambda: _run(args))
    except KeyboardInterrupt:
        print(
            "parley delegate: interrupted; answers still to come are dropped by the next one",
            file=sys.stderr,
        )
        return 130


def add_delegate_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `delegate` to the `parley` command."""
    delegate = commands.add_parser(
        "delegate",
        help='hand a task to an agent, or to several at once: parley delegate @coder "…"',
    )
    delegate.add_argument(
        "words", nargs="*", metavar="[@agent] objective", help="the agent, then the objective"
    )
    delegate.add_argument(
        "--fan-out", metavar="@a,@b,@c", help="ask these agents at once (seed 003's parallel mode)"
    )
    delegate.add_argument("--input", default="", help="the full message for the agent")
    delegate.add_argument(
        "--deadline-ms",
        type=int,
        default=_DEFAULTS.deadline_ms,
        help=f"how long each agent has (default {_DEFAULTS.deadline_ms}; the policy may cap it)",
    )
    delegate.add_argument(
        "--max-tokens",
        type=int,
        default=_DEFAULTS.max_tokens,
        help=f"each agent's token budget (default {_DEFAULTS.max_tokens})",
    )
    delegate.add_argument("--user", default="", help="user id carried by the requests")
    delegate.add_argument("--config", type=Path, help="TOML settings file")
    delegate.add_argument(
        "--detach", action="store_true", help="submit the requests and wait for no answer"
    )
    delegate.set_defaults(func=_command)
