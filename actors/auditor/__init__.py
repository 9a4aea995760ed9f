"""The auditor: the only writer of the hash-chained audit history.

Public face: `AuditorActor` and its `AuditorOptions`, the process `parley run auditor` runs;
and the chain's verifier (`ChainVerifier`, `ChainReport`, `CHECKPOINT_PROFILE`), which
`parley audit verify` uses.

Inside: `_actor` (the process), `_facts` (what a decision or session event is recorded as),
`_dead_letters` (what a dead letter is recorded as), `_appender` (compare-and-set appends to
the chain), `_lease` (the writer's lease: one replica appends, the others stand by), `_chain`
(records, hashing, checkpoints and verification).
"""

from actors.auditor._actor import AuditorActor, AuditorOptions
from actors.auditor._chain import CHECKPOINT_PROFILE, ChainReport, ChainVerifier

__all__ = (
    "CHECKPOINT_PROFILE",
    "AuditorActor",
    "AuditorOptions",
    "ChainReport",
    "ChainVerifier",
)
