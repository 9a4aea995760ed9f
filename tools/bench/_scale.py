"""The `scale` row of `parley bench`: whether Parley's cost stays flat as the work grows.

Each figure is printed with its aim and PASS or FAIL (a figure that was not measured, or a
run whose result is wrong, fails). The row holds:

- `audit_verify` (tools/bench/_scale_audit.py): `parley audit verify` over a long chain,
  records per second and the verifying process's peak resident memory.
"""

from __future__ import annotations

from typing import Any

from tools.bench._scale_audit import AIM_MAX_RSS_MB, AIM_RECORDS_PER_S, audit_verify_scale

__all__ = ("print_scale", "scale_rows")


async def scale_rows(audit_records: int) -> dict[str, Any]:
    """Run every figure of the row; `audit_records`: records the verify walks."""
    return {"audit_verify": await audit_verify_scale(audit_records)}


def _verdict(what: str, figure: str, aim: str, passed: bool) -> None:
    print(f"  {what:<44} {figure:>14}   aim {aim:<12} {'PASS' if passed else 'FAIL'}")


def print_scale(result: dict[str, Any]) -> None:
    """Print each figure of the row with its aim and verdict."""
    audit = result["audit_verify"]
    print(
        f"\nscale: `parley audit verify --strict` over {audit['records']:,} records "
        f"(a signed checkpoint every 1,000), as a child process"
    )
    if not audit["chain_verified"]:
        print("  the verify did not report every record written in an intact chain:")
        print("    " + audit["verify_output"].strip().replace("\n", "\n    "))
    _verdict(
        "records verified per second (spawn to exit)",
        f"{audit['records_per_s']:,.0f}",
        f">= {AIM_RECORDS_PER_S:,.0f}",
        audit["pass"]["records_per_s"],
    )
    _verdict(
        "peak resident memory of the verify (wait4)",
        f"{audit['peak_rss_mb']:.0f} MB",
        f"< {AIM_MAX_RSS_MB:.0f} MB",
        audit["pass"]["peak_rss_mb"],
    )
    print(
        f"  (its CPU: {audit['verify_cpu_us_per_record']:.1f} us a record, "
        f"{audit['verify_wall_s']:.1f} s wall; writing the chain took {audit['write_s']:.1f} s)"
    )
