"""The auditor: the only writer of the hash-chained audit history.

Public face: `AuditorActor` and its `AuditorOptions`, the process `parley run auditor` runs;
the chain's verifier (`ChainVerifier`, `ChainReport`, `CHECKPOINT_PROFILE`), which
`parley audit verify` uses; and how a chain is made (`records_for` from a fact and its
`FactSource`, through a `Redactor`; `seal` after `GENESIS`; `Checkpoint`, `sign_checkpoint`),
which `parley bench --only scale` uses to write a long chain as the auditor would.

Inside: `_actor` (the process), `_facts` (what a decision or session event is recorded as),
`_dead_letters` (what a dead letter is recorded as), `_appender` (compare-and-set appends to
the chain), `_lease` (the writer's lease: one replica appends, the others stand by), `_chain`
(records, hashing, checkpoints and verification).
"""

from actors.auditor._actor import AuditorActor, AuditorOptions
from actors.auditor._chain import (
    CHECKPOINT_PROFILE,
    GENESIS,
    ChainReport,
    ChainVerifier,
    Checkpoint,
    seal,
    sign_checkpoint,
)
from actors.auditor._facts import FactSource, Redactor, records_for

__all__ = (
    "CHECKPOINT_PROFILE",
    "GENESIS",
    "AuditorActor",
    "AuditorOptions",
    "ChainReport",
    "ChainVerifier",
    "Checkpoint",
    "FactSource",
    "Redactor",
    "records_for",
    "seal",
    "sign_checkpoint",
)
