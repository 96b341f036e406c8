"""Who decides whether a request is traced, and how much of a caller's context a span keeps.

`CallerBoundSampler` wraps the configured sampler: unless ELOVA_TRACING_TRUST_INCOMING is
true, a remote parent's sampled flag is ignored and the sampler decides as for a new trace,
on a random draw, never on the caller's trace id; the span stays in the caller's trace.
`bounded_trace_state` keeps its `tracestate` to at most TRACESTATE_CHARS. Why:
docs/decisions/tracing.md, "A caller cannot force a trace".
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState

TRACESTATE_CHARS = 512
TRACESTATE_ENTRY_CHARS = 128


def bounded_trace_state(state: TraceState | None) -> TraceState | None:
    """`state` with at most TRACESTATE_CHARS of entries (W3C Trace Context, 3.3.1.5): as W3C
    advises, entries over TRACESTATE_ENTRY_CHARS are dropped first, then from the end."""
    if state is None or len(state.to_header()) <= TRACESTATE_CHARS:
        return state
    kept: list[tuple[str, str]] = []
    size = 0
    for key, value in state.items():
        entry = len(key) + 1 + len(value)
        if entry > TRACESTATE_ENTRY_CHARS or size + entry + (1 if kept else 0) > TRACESTATE_CHARS:
            continue
        kept.append((key, value))
        size += entry + (1 if len(kept) > 1 else 0)
    return TraceState(kept)


class CallerBoundSampler(Sampler):
    """The configured sampler, deciding remote parents' requests itself (unless trusted)
    and bounding the tracestate every span carries.

    A caller's `traceparent` may carry the sampled flag (`-01`) and a trace id of its
    choosing; a ratio sampler that follows either lets anyone on the internet force every
    request of theirs to be recorded (401s included). An unsampled flag is still followed by
    a parent-based sampler: a caller may leave its requests out, not force them in."""

    def __init__(self, inner: Sampler, *, trust_incoming: bool) -> None:
        self._inner = inner
        self._trust = trust_incoming

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if parent.is_valid and parent.is_remote and not self._trust:
            # Decided on a random id, never the caller's; a sampled flag is not followed
            # (decided as for a new trace), an unsampled one still is by a parent-based
            # sampler (a caller may keep its own requests out of traces, not force them in).
            fresh = random.getrandbits(128) or 1
            seen = None if parent.trace_flags.sampled else parent_context
            decided = self._inner.should_sample(seen, fresh, name, kind, attributes, links)
            return SamplingResult(
                decided.decision, decided.attributes, bounded_trace_state(parent.trace_state)
            )
        decided = self._inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        return SamplingResult(
            decided.decision, decided.attributes, bounded_trace_state(decided.trace_state)
        )

    def get_description(self) -> str:
        trust = "trusted" if self._trust else "untrusted"
        return f"CallerBound{{{self._inner.get_description()},{trust}}}"
