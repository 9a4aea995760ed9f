"""The command lines of `parley collab` and `say`: the message each asks for, and why one
cannot make a valid message, said before anything is sent (field, limits and value) rather
than dead-lettered by the gate while the command waits."""

from __future__ import annotations

import argparse

import msgspec

from schemas import HumanMessage, SubjectTokenError, check_token, encode, new_id, utc_now

__all__ = ("check_arguments", "human_message")


def human_message(args: argparse.Namespace, *, single: bool) -> HumanMessage:
    """The message a `collab` or `say` command line asks for."""
    if single:
        target = args.agent.removeprefix("@")
        return HumanMessage(
            id=new_id(),
            created_at=utc_now(),
            text=" ".join(args.text),
            call_id=new_id(),
            user_id=args.user,
            mode="single",
            participants=(target,),
            first_speaker=target,
            max_rounds=1,
            session_id=new_id(),
        )
    agents = tuple(a.strip() for a in args.agents.split(",") if a.strip())
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=" ".join(args.goal),
        call_id=new_id(),
        user_id=args.user,
        mode="collaborate",
        participants=agents,
        first_speaker=args.first or agents[0],
        max_rounds=args.max_rounds,
        session_id=new_id(),
    )


def _int_limits(struct: type[msgspec.Struct], name: str) -> tuple[int | None, int | None]:
    """The inclusive bounds the schema puts on an integer field (None: unbounded)."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)  # noqa: S101 - a Struct's info
    for field in info.fields:
        kind = field.type
        if field.name == name and isinstance(kind, msgspec.inspect.IntType):
            low = kind.ge if kind.gt is None else kind.gt + 1
            high = kind.le if kind.lt is None else kind.lt - 1
            return low, high
    return None, None


def check_arguments(args: argparse.Namespace, *, single: bool) -> str | None:
    """Why the command line cannot make a valid message (field, limit and value), or None."""
    if args.timeout is not None and not args.timeout > 0:  # NaN too
        return f"--timeout must be more than 0 seconds, got {args.timeout:g}"
    named = args.stop or args.follow
    if named is not None:
        if (args.stop and args.follow) or args.detach:
            return "--stop, --follow and --detach go alone: give one of them"
        try:
            check_token(named, "session id")
        except SubjectTokenError as exc:
            return f"invalid arguments: {exc}"
        return None
    if not single and not " ".join(args.goal).strip():
        return "invalid arguments: say what the agents should do together (the goal)"
    if not single:
        agents = [a.strip() for a in args.agents.split(",") if a.strip()]
        if args.first is not None and args.first not in agents:
            return f"--first {args.first} is not one of --agents ({', '.join(agents)})"
        low, high = _int_limits(HumanMessage, "max_rounds")
        value = args.max_rounds
        if (low is not None and value < low) or (high is not None and value > high):
            return f"--max-rounds (max_rounds) must be within {low}..{high}, got {value}"
    try:
        msgspec.json.decode(encode(human_message(args, single=single)), type=HumanMessage)
    except msgspec.ValidationError as exc:
        return f"invalid arguments: {exc}"
    except IndexError:  # no agent named at all
        return "invalid arguments: --agents names no agent"
    return None
