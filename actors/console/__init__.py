"""The console: a web page and a JSON-RPC 2.0 control API (seed 002 §11) for people.

Public face: `ConsoleActor` (`parley run console`), `TokenStore` and `principal_of` (what
`parley console token` uses), `ConsoleOptions`, `CONTENT_SECURITY_POLICY`; `TaskView` (a
task session's state, which `parley task` folds as the console does); for another client of a
person's own principal (`parley mcp`), `SessionRecord`, `DelegationInbox`, `delegation_result`
and `ANSWER_MARGIN_S`; and a person's link to the bus (`PersonLink`, `person_settings`,
`Notification`), which the A2A edge uses to act for its clients as the console acts for people.

Inside: `_tokens` (hashed sign-in tokens), `_options`, `_person` (one person's own principal
on the bus), `_people` (every person's link and sign-ins), `_timeline` (a session's events and
state, pure), `_task` (a task session's seed 002 §7 state and steps, pure), `_task_rpc` (its
tool approvals and patch preview), `_params` (the methods' params), `_rpc` (the JSON-RPC
methods) and `_rpc_errors` (its error model), `_delegations` (a person's seed 003 answers,
read from its durable), `_audit` (a person's own audit records and trace trees, read as the
audit reader), `_credentials` (the settings of a principal it connects as), `_agents` (the
registered agents' names), `_app` (HTTP, WebSocket and security headers), `_actor` (the
process), and `static/` (the page, shipped as package data).
"""

from typing import TYPE_CHECKING

from actors.console._delegations import ANSWER_MARGIN_S, DelegationInbox, delegation_result
from actors.console._options import ConsoleOptions
from actors.console._person import Notification, PersonLink, person_settings
from actors.console._task import TaskView
from actors.console._timeline import SessionRecord
from actors.console._tokens import (
    DEFAULT_TOKENS_FILE,
    TokenStore,
    TokenStoreError,
    principal_of,
)
from bus import lazy_exports

if TYPE_CHECKING:
    from actors.console._actor import ConsoleActor
    from actors.console._app import CONTENT_SECURITY_POLICY

# The web server (uvicorn, starlette, websockets) only for a process that runs the console.
__getattr__ = lazy_exports(
    __name__,
    {"ConsoleActor": "actors.console._actor", "CONTENT_SECURITY_POLICY": "actors.console._app"},
)

__all__ = (
    "ANSWER_MARGIN_S",
    "CONTENT_SECURITY_POLICY",
    "DEFAULT_TOKENS_FILE",
    "ConsoleActor",
    "ConsoleOptions",
    "DelegationInbox",
    "Notification",
    "PersonLink",
    "SessionRecord",
    "TaskView",
    "TokenStore",
    "TokenStoreError",
    "delegation_result",
    "person_settings",
    "principal_of",
)
