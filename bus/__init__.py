"""NATS machinery: connection, provisioning, consumer loops, headers, the process runner,
the embedded server, the supervisor and the child processes both of them (and the chaos
harness) start and stop. Imports `schemas`; never imports `actors` or `tools`."""

from bus._ackinbox import (
    AckInbox,
    AppendRefused,
    AppendTimeout,
    MessageTooLarge,
    PublishLost,
    PublishStalled,
    wire_size,
)
from bus._actor import Actor, BusHandle, Input
from bus._bundle_reader import BundleReader
from bus._bundles import BUNDLE_KEY, TRUSTED_VERSION_KEY, BundleStore, load_public_keys
from bus._cluster import EmbeddedCluster
from bus._connection import (
    RECONNECT_WAIT_S,
    RECONNECT_WINDOW_S,
    Link,
    Uptime,
    connect,
    jetstream,
)
from bus._consumer import ConsumerLoop
from bus._consumer_config import ConsumerBindError, consumer_config
from bus._context import Context, Deferral
from bus._deadletter import (
    DEAD_ACTOR,
    DEAD_ATTEMPT,
    DEAD_DETAIL,
    DEAD_REASON,
    DEAD_SEQ,
    DEAD_STREAM,
    DEAD_SUBJECT,
    DEAD_TRUNCATED,
    DeadLetters,
    dead_letters_for,
)
from bus._elections import (
    ELECTION_BACKOFF_S,
    ELECTION_BOUND_S,
    is_election_error,
    through_elections,
    through_elections_if_clustered,
)
from bus._embedded import EmbeddedServer, NatsServerError, find_nats_server
from bus._fsync_check import FsyncCheckError, check_fsync
from bus._headers import (
    BOUND_BY,
    CAUSATION_ID,
    DEADLINE,
    HOP_COUNT,
    MSG_ID,
    ORIGIN,
    OWNER,
    SENDER,
    SENDER_ROLE,
    SESSION,
    TRACE_ID,
    TRACEPARENT,
    HeaderError,
    TraceHeaders,
    parse_trace_headers,
    traceparent_for,
    well_formed_traceparent,
)
from bus._history import HistoryError, StoredMessage, read_history, read_history_batches
from bus._keys import KeyFileError, load_private_key, load_public_key
from bus._kv_history import leader_history, leader_revision
from bus._last_values import LastValues
from bus._lazy import lazy_exports
from bus._lifeline import owned_argv, stop_like_interrupt
from bus._logging import configure_logging, current_trace_id, trace_scope
from bus._lost_requests import fail_lost_requests
from bus._metrics import ActorMetrics, serve_metrics
from bus._outbox import EffectError, Outbox
from bus._process import (
    ACTOR_READY,
    PYTHON_PLACEHOLDER,
    ChildProcess,
    actor_command,
    python_command,
)
from bus._provision import (
    AGENT_BUCKETS,
    ARTIFACTS,
    BUCKETS,
    RETIRED_BUCKETS,
    STREAM_FAMILIES,
    ProvisionError,
    provision,
    provision_agent,
)
from bus._puller import Puller, PullRefusedError
from bus._quarantine import Quarantine, handling_key
from bus._quotas import AccountLimits, Quotas
from bus._refusals import ConnectionRefusals, asked_at_start
from bus._rejection import Rejection
from bus._retention import DAY_S, Retention
from bus._runner import ExitCode, dump_tasks, run_actor
from bus._runtime import ActorRuntime
from bus._scratch import abandoned_scratch, scratch_directory
from bus._session_ends import ENDS, EndedSessions
from bus._session_locks import SessionLocks
from bus._settings import (
    ConfigError,
    Settings,
    describe_invalid,
    load_settings,
    validated_options,
)
from bus._shares import (
    ANSWER_TERMS,
    ARTIFACT_TERMS,
    RECORD_TERMS,
    SESSION_TERMS,
    SHARE_WINDOWS,
    Charge,
    Payer,
    ShareExceeded,
    Shares,
    ShareTerms,
    usage_key,
)
from bus._shipped import SHIPPED_ROOT, shipped
from bus._store_lock import StoreInUseError
from bus._stream_configs import agent_timers_config, stream_configs
from bus._supervisor import ChildSpec, Supervisor, Topology, load_topology
from bus._tracing import (
    carried_traceparent,
    configure_tracing,
    continue_carried,
    shutdown_tracing,
    trace_publish,
)

__all__ = (
    "ACTOR_READY",
    "AGENT_BUCKETS",
    "ANSWER_TERMS",
    "ARTIFACTS",
    "ARTIFACT_TERMS",
    "BOUND_BY",
    "BUCKETS",
    "BUNDLE_KEY",
    "CAUSATION_ID",
    "DAY_S",
    "DEADLINE",
    "DEAD_ACTOR",
    "DEAD_ATTEMPT",
    "DEAD_DETAIL",
    "DEAD_REASON",
    "DEAD_SEQ",
    "DEAD_STREAM",
    "DEAD_SUBJECT",
    "DEAD_TRUNCATED",
    "ELECTION_BACKOFF_S",
    "ELECTION_BOUND_S",
    "ENDS",
    "HOP_COUNT",
    "MSG_ID",
    "ORIGIN",
    "OWNER",
    "PYTHON_PLACEHOLDER",
    "RECONNECT_WAIT_S",
    "RECONNECT_WINDOW_S",
    "RECORD_TERMS",
    "RETIRED_BUCKETS",
    "SENDER",
    "SENDER_ROLE",
    "SESSION",
    "SESSION_TERMS",
    "SHARE_WINDOWS",
    "SHIPPED_ROOT",
    "STREAM_FAMILIES",
    "TRACEPARENT",
    "TRACE_ID",
    "TRUSTED_VERSION_KEY",
    "AccountLimits",
    "AckInbox",
    "Actor",
    "ActorMetrics",
    "ActorRuntime",
    "AppendRefused",
    "AppendTimeout",
    "BundleReader",
    "BundleStore",
    "BusHandle",
    "Charge",
    "ChildProcess",
    "ChildSpec",
    "ConfigError",
    "ConnectionRefusals",
    "ConsumerBindError",
    "ConsumerLoop",
    "Context",
    "DeadLetters",
    "Deferral",
    "EffectError",
    "EmbeddedCluster",
    "EmbeddedServer",
    "EndedSessions",
    "ExitCode",
    "FsyncCheckError",
    "HeaderError",
    "HistoryError",
    "Input",
    "KeyFileError",
    "LastValues",
    "Link",
    "MessageTooLarge",
    "NatsServerError",
    "Outbox",
    "Payer",
    "ProvisionError",
    "PublishLost",
    "PublishStalled",
    "PullRefusedError",
    "Puller",
    "Quarantine",
    "Quotas",
    "Rejection",
    "Retention",
    "SessionLocks",
    "Settings",
    "ShareExceeded",
    "ShareTerms",
    "Shares",
    "StoreInUseError",
    "StoredMessage",
    "Supervisor",
    "Topology",
    "TraceHeaders",
    "Uptime",
    "abandoned_scratch",
    "actor_command",
    "agent_timers_config",
    "asked_at_start",
    "carried_traceparent",
    "check_fsync",
    "configure_logging",
    "configure_tracing",
    "connect",
    "consumer_config",
    "continue_carried",
    "current_trace_id",
    "dead_letters_for",
    "describe_invalid",
    "dump_tasks",
    "fail_lost_requests",
    "find_nats_server",
    "handling_key",
    "is_election_error",
    "jetstream",
    "lazy_exports",
    "leader_history",
    "leader_revision",
    "load_private_key",
    "load_public_key",
    "load_public_keys",
    "load_settings",
    "load_topology",
    "owned_argv",
    "parse_trace_headers",
    "provision",
    "provision_agent",
    "python_command",
    "read_history",
    "read_history_batches",
    "run_actor",
    "scratch_directory",
    "serve_metrics",
    "shipped",
    "shutdown_tracing",
    "stop_like_interrupt",
    "stream_configs",
    "through_elections",
    "through_elections_if_clustered",
    "trace_publish",
    "trace_scope",
    "traceparent_for",
    "usage_key",
    "validated_options",
    "well_formed_traceparent",
    "wire_size",
)
