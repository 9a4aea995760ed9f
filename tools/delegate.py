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

Exit codes: 0 every answer succeeded, 1 one was partial, failed, refused or late, 2 the
arguments (or the configuration) are invalid, 3 NATS cannot be reached, 130 interrupted.
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
import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from actors.delegation import (
    Delegate,
    RequestResult,
    aggregate_status,
    answered_request,
    request_envelope,
)
from bus import SENDER, ConfigError, Input, Settings, TraceHeaders, consumer_config, jetstream
from schemas import (
    DecodeError,
    DelegationConstraints,
    DelegationRequest,
    DelegationResponse,
    Error,
    Namespace,
    SubjectTokenError,
    check_token,
    decode_envelope,
    encode,
    hop_delta_for,
    new_id,
)
from tools._local import PERSON, connect_local, local_settings

__all__ = ("Outcome", "add_delegate_command", "check_arguments", "gather", "render")

_MARGIN_S: Final = 2.0
"""Past a request's deadline: the answer made at the deadline still crosses the gate."""
_DEFAULTS: Final = DelegationConstraints()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one target made of its request: seed 003's status and what to show for it."""

    target: str
    result: RequestResult
    detail: str
    """How it ended, in brackets after the status: tokens and time, or why there is no answer."""


@dataclass(frozen=True, slots=True)
class _Pending:
    target: str
    deadline_ms: int
    sent_at: float
    """The event loop's clock when the request was submitted."""

    @property
    def due(self) -> float:
        """When to stop waiting for the answer, on the same clock."""
        return self.sent_at + self.deadline_ms / 1000 + _MARGIN_S


def _seconds(ms: int) -> str:
    """Seed 004's `(812 tokens, 2s)`, with a tenth of a second where it tells something."""
    return f"{ms / 1000:.1f}".removesuffix(".0") + "s"


def render(outcome: Outcome) -> str:
    """The lines a terminal shows for one answer: seed 004's `coder returned: SUCCESS (…)`
    and the text, indented."""
    head = f"{outcome.target} returned: {outcome.result.status.upper()} ({outcome.detail})"
    body = [f"    {line}" for line in outcome.result.content.splitlines()]
    return "\n".join([head, *body])


def _response_outcome(target: str, answer: DelegationResponse, elapsed_ms: int) -> Outcome:
    shown = answer.result or answer.summary
    if answer.error:
        shown = f"{shown}\nerror: {answer.error}".strip()
    took = answer.duration_ms if answer.duration_ms is not None else elapsed_ms
    result = RequestResult(
        request_id=answer.request_id,
        status=answer.status,
        content=shown,
        tokens=answer.token_usage.total,
        duration_ms=took,
    )
    return Outcome(target, result, f"{result.tokens} tokens, {_seconds(took)}")


def _error_outcome(target: str, error: Error, sender: str, elapsed_ms: int) -> Outcome:
    """An agent that could not answer, or a gate that refused the request (it is the sender of
    its refusals; an agent's own error is delivered as the agent's)."""
    result = RequestResult(
        request_id=error.cause_id or "",
        status="failed",
        content=f"{error.code}: {error.message}",
        duration_ms=elapsed_ms,
    )
    detail = "the agent could not answer" if sender == target else "refused by the gate"
    return Outcome(target, result, detail)


def _timeout_outcome(request_id: str, pending: _Pending) -> Outcome:
    result = RequestResult(
        request_id=request_id,
        status="timeout",
        content=f"Delegation timeout after {pending.deadline_ms}ms",  # seed 003's words
        duration_ms=pending.deadline_ms,
    )
    return Outcome(pending.target, result, "no answer")


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


def _answer_in(msg: Msg, pending: dict[str, _Pending], now: float) -> tuple[Outcome, str] | None:
    """The outcome `msg` brings for a request still pending, with that request's id, or None
    (it answers no request of ours, or does not decode)."""
    try:
        answer = decode_envelope(msg.data)
    except DecodeError:
        return None
    request_id = answered_request(answer)
    waiting = pending.get(request_id) if request_id is not None else None
    if request_id is None or waiting is None:
        return None
    elapsed_ms = int((now - waiting.sent_at) * 1000)
    if isinstance(answer, DelegationResponse):
        return _response_outcome(waiting.target, answer, elapsed_ms), request_id
    if isinstance(answer, Error):
        sender = (msg.headers or {}).get(SENDER, "")
        return _error_outcome(waiting.target, answer, sender, elapsed_ms), request_id
    return None


async def gather(
    js: JetStreamContext,
    ns: Namespace,
    person: str,
    requests: Sequence[DelegationRequest],
    inbox: JetStreamContext.PullSubscription,
    *,
    out: TextIO,
) -> list[Outcome]:
    """Submit every request at once as `person`, then print each answer as it comes, or its
    timeout once its deadline (plus the margin) has passed; the outcomes in arrival order.
    Sent together: one by one, a first answer could beat the last request to a limit."""
    loop = asyncio.get_running_loop()
    pending: dict[str, _Pending] = {}
    stores = []
    for request in requests:
        print(f"{person} delegating to {request.target_employee}: {request.objective}", file=out)
        position = TraceHeaders(
            trace_id=request.id, hop_count=hop_delta_for(request), origin=person
        )
        stores.append(
            js.publish(ns.submit(person), encode(request), headers=position.to_headers(request.id))
        )
        pending[request.id] = _Pending(
            request.target_employee, request.constraints.deadline_ms, loop.time()
        )
    await asyncio.gather(*stores)
    out.flush()
    outcomes: list[Outcome] = []

    def settle(outcome: Outcome, request_id: str) -> None:
        del pending[request_id]
        outcomes.append(outcome)
        print(render(outcome), file=out, flush=True)

    while pending:
        now = loop.time()
        for request_id, waiting in list(pending.items()):
            if now >= waiting.due:
                settle(_timeout_outcome(request_id, waiting), request_id)
        if not pending:
            break
        due = min(waiting.due for waiting in pending.values())
        try:
            # One at a time: nats-py's fetch of several can hold an answer back until its
            # timeout (a late status taken for the next fetch's; docs/benchmarks.md).
            messages = await inbox.fetch(1, timeout=max(due - now, 0.05))
        except TimeoutError:
            continue
        for msg in messages:
            found = _answer_in(msg, pending, loop.time())
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
    nc = await connect_local(settings, person)
    try:
        js = jetstream(nc, settings)
        inbox = await _inbox(js, ns, person, settings)
        outcomes = await gather(
            js, ns, person, _requests(plan, args, person), inbox, out=sys.stdout
        )
    finally:
        await nc.close()
    status = aggregate_status([outcome.result for outcome in outcomes])
    if plan.fan_out:
        won = sum(outcome.result.status == "success" for outcome in outcomes)
        print(f"fan-out: {status} ({won} of {len(outcomes)} succeeded)", flush=True)
    return 0 if status == "success" else 1


def _command(args: argparse.Namespace) -> int:
    problem = check_arguments(args)
    if problem is not None:
        print(f"parley delegate: {problem}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args))
    except ConfigError as exc:
        print(f"parley delegate: {exc}", file=sys.stderr)
        return 2
    except (OSError, nats.errors.NoServersError) as exc:
        print(f"parley delegate: cannot reach NATS: {exc}", file=sys.stderr)
        return 3
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
    delegate.set_defaults(func=_command)
