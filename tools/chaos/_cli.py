"""The `parley chaos` command line: its arguments, `--plan`, and the run it starts."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from bus import scratch_directory, stop_like_interrupt
from tools.chaos._command import CHAOS_POLICY, ChaosOptions, run_chaos
from tools.chaos._llm_mix import gateway_kills
from tools.chaos._schedule import SERVER, cluster_targets, merged, plan_faults, router_kills
from tools.chaos._shared_command import SharedChaosOptions, run_shared_chaos
from tools.chaos._shared_faults import plan_shared_faults
from tools.chaos._topology import run_topology

__all__ = ("add_chaos_command",)


def _cmd_shared(args: argparse.Namespace) -> int:
    ignored = [
        flag
        for flag, given in (
            ("--cluster", args.cluster),
            ("--delegations", args.delegations),
            ("--kill-router-every", args.kill_router_every),
            ("--no-server-faults", args.no_server_faults),
            ("--open-broker", args.open_broker),
            ("--tools", args.tools),
            ("--llm", args.llm),
        )
        if given
    ]
    if ignored:
        print(f"parley chaos: --shared runs its own two deployments; not with {', '.join(ignored)}")
        return 2
    if args.plan:
        for fault in plan_shared_faults(args.seed, args.duration):
            print(fault.describe())
        return 0
    options = SharedChaosOptions(
        seed=args.seed,
        duration_s=args.duration,
        sessions=args.sessions or SharedChaosOptions.sessions,
        ack_wait_s=args.ack_wait,
        keep=args.keep,
    )
    return _verdict_or_interrupted(lambda: asyncio.run(run_shared_chaos(options))[0])


def _verdict_or_interrupted(run: Callable[[], int]) -> int:
    """The run's exit code; 130 and one line when a stop signal ended it before its verdict
    (it ended silently: an operator's walk)."""
    try:
        return run()
    except KeyboardInterrupt:
        print(
            "parley chaos: interrupted before its verdict; everything it started is stopped",
            file=sys.stderr,
        )
        return 130


def _out_of_range(args: argparse.Namespace) -> str | None:
    """What is wrong with the figures given, said before anything starts: a `--duration 0`
    started the whole topology to fail, `--sessions 0` ran the default number silently, and
    negative workers were planned (an operator's walk)."""
    positive = {"--duration": args.duration, "--ack-wait": args.ack_wait}
    positive |= {"--sessions": args.sessions, "--kill-router-every": args.kill_router_every}
    for flag, value in positive.items():
        if value is not None and not value > 0:
            return f"{flag} {value:g} must be more than 0"
    counts = {"--delegations": args.delegations, "--tools": args.tools, "--llm": args.llm}
    for flag, value in counts.items():
        if value < 0:
            return f"{flag} {value} must be 0 or more"
    return None


def _cmd_chaos(args: argparse.Namespace) -> int:
    wrong = _out_of_range(args)
    if wrong is not None:
        print(f"parley chaos: {wrong}", file=sys.stderr)
        return 2
    stop_like_interrupt()  # SIGTERM, SIGHUP: unwind like Ctrl-C, stopping every process started
    if args.shared:
        return _cmd_shared(args)
    options = ChaosOptions(
        seed=args.seed,
        duration_s=args.duration,
        sessions=args.sessions or ChaosOptions.sessions,
        ack_wait_s=args.ack_wait,
        server_faults=not args.no_server_faults,
        keep=args.keep,
        policy=args.policy,
        locked_down=not args.open_broker,
        kill_router_every_s=args.kill_router_every,
        delegations=args.delegations,
        cluster=args.cluster or 0,
        tools=args.tools,
        llm=args.llm,
    )
    if args.plan:
        with scratch_directory("parley-chaos-plan-") as scratch:
            # demo_topology writes the auditor's key beside the policy key: keep it out of cwd
            work = Path(scratch)
            topology = run_topology(
                options.agents, options.delegations, options.tools, work, work, llm=options.llm
            )
        names = [spec.name for spec in topology.actor]
        servers = cluster_targets(args.cluster) if args.cluster else (SERVER,)
        plan = plan_faults(args.seed, args.duration, names, servers=servers)
        if args.kill_router_every is not None:
            plan = merged(plan, router_kills(args.kill_router_every, args.duration))
        if args.llm:
            plan = merged(plan, gateway_kills(args.duration))
        for fault in plan:
            print(fault.describe())
        return 0
    return _verdict_or_interrupted(lambda: asyncio.run(run_chaos(options))[0])


def add_chaos_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = commands.add_parser(
        "chaos", help="run the demo topology under load and seeded faults; check nothing is lost"
    )
    chaos.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    chaos.add_argument("--duration", type=float, default=60.0, help="seconds of load and faults")
    chaos.add_argument(
        "--sessions", type=int, help="concurrent sessions (default 4; 2 with --shared)"
    )
    chaos.add_argument(
        "--delegations",
        type=int,
        default=0,
        metavar="N",
        help="also N workers delegating to gpt, which fans out to claude and a reviewer",
    )
    chaos.add_argument(
        "--tools",
        type=int,
        default=0,
        metavar="N",
        help="also N workers having a tool-using agent append lines through the tool runtime "
        "(which the run starts, and may kill)",
    )
    chaos.add_argument(
        "--llm",
        type=int,
        default=0,
        metavar="N",
        help="also N workers having an agent answer through the LLM gateway, streamed from a "
        "slow local provider (the run starts both, and SIGKILLs the gateway mid-stream)",
    )
    chaos.add_argument("--ack-wait", type=float, default=2.0, help="actors' ack wait (s)")
    chaos.add_argument(
        "--no-server-faults", action="store_true", help="leave the nats-server alone"
    )
    chaos.add_argument(
        "--policy", type=Path, default=CHAOS_POLICY, help="the bundle source the gate enforces"
    )
    chaos.add_argument(
        "--cluster",
        type=int,
        choices=range(3, 8),
        metavar="N",
        help="run the broker as N nodes; kill and pause nodes and PARLEY_SUBMIT's leader",
    )
    chaos.add_argument(
        "--shared",
        action="store_true",
        help="two deployments and a gateway: orchestrated sessions with Bob's shared agent "
        "while relays, Alice's local agent host, router and the gateway are SIGKILLed",
    )
    chaos.add_argument("--plan", action="store_true", help="print the schedule and exit")
    chaos.add_argument(
        "--kill-router-every",
        type=float,
        metavar="S",
        help="also SIGKILL the router every S seconds (faster than a turn's timeout)",
    )
    chaos.add_argument(
        "--keep",
        type=Path,
        help="keep the server store, the generated broker config and actor logs here",
    )
    chaos.add_argument(
        "--open-broker",
        action="store_true",
        help="run the server without users (default: one nkey user per actor, least privilege)",
    )
    chaos.set_defaults(func=_cmd_chaos)
