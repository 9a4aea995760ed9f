"""`parley nats-config`: the least-privilege broker config, from one table of permissions.

Public face: the command (`add_natsconf_commands`, `write_nats_config` and the readers of what
it writes) and the permissions it writes (`permissions_for`, `settings_for`, the roles and
accounts).

Inside: `_command` (users, keys, accounts and files), `_permissions` (what each principal
may publish, subscribe, import and read, and why), `_grants` (the subjects each such act needs),
`_operator` (the read-only `operator` role of the nats CLI), `_system` (the optional
system-account user) and `_gateway` (`parley gateway-config`: the shared-agent gateway's
users, one per relay device).
"""

from tools.natsconf._command import (
    AUTHORIZATION,
    DEFAULT_ACTORS,
    add_natsconf_commands,
    new_user_seed,
    public_key,
    read_accounts,
    read_authorization,
    relay_serves_of,
    write_nats_config,
)
from tools.natsconf._gateway import (
    GATEWAY_ADMIN,
    add_gateway_command,
    connect_gateway_operator,
    create_gateway_stream,
    gateway_permissions,
    write_gateway_config,
)
from tools.natsconf._permissions import (
    A2A,
    ARTIFACT_READER,
    AUDIT_READER,
    CONSOLE,
    CORE_ACCOUNT,
    FIXED_ROLES,
    IMPORTED_JS_API,
    LLM,
    OPERATOR,
    OPERATOR_ROLES,
    PERSON_PREFIX,
    POLICY_SIGNER,
    PROVISIONER,
    RELAY,
    TOOLS,
    TRUSTED_ROLES,
    Permissions,
    account_of,
    core_subject,
    permissions_for,
    role_of,
    settings_for,
)
from tools.natsconf._system import SYSTEM_ACCOUNT, SYSTEM_USER

__all__ = (
    "A2A",
    "ARTIFACT_READER",
    "AUDIT_READER",
    "AUTHORIZATION",
    "CONSOLE",
    "CORE_ACCOUNT",
    "DEFAULT_ACTORS",
    "FIXED_ROLES",
    "GATEWAY_ADMIN",
    "IMPORTED_JS_API",
    "LLM",
    "OPERATOR",
    "OPERATOR_ROLES",
    "PERSON_PREFIX",
    "POLICY_SIGNER",
    "PROVISIONER",
    "RELAY",
    "SYSTEM_ACCOUNT",
    "SYSTEM_USER",
    "TOOLS",
    "TRUSTED_ROLES",
    "Permissions",
    "account_of",
    "add_gateway_command",
    "add_natsconf_commands",
    "connect_gateway_operator",
    "core_subject",
    "create_gateway_stream",
    "gateway_permissions",
    "new_user_seed",
    "permissions_for",
    "public_key",
    "read_accounts",
    "read_authorization",
    "relay_serves_of",
    "role_of",
    "settings_for",
    "write_gateway_config",
    "write_nats_config",
)
