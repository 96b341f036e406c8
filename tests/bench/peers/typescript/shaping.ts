// How the TypeScript peer shapes a row: as our tool does (service.tools.executions.shape_row),
// the same fields in the same order, from the values `pg` returns (uuid and numeric as text,
// int8 as numbers through the server's type parser). tests/bench/test_peers.py checks it
// against ours.
const WORKFLOW_NAME_LENGTH = 100;
const LABEL_LENGTH = 200;

export type Row = Record<string, any>;

// Shortened to `limit` code points (ours: Python's len and slice).
function shorten(text: string, limit: number): [string, boolean] {
  if (text.length <= limit) return [text, false];
  const points = Array.from(text);
  return points.length <= limit ? [text, false] : [points.slice(0, limit).join(''), true];
}

// Plain notation, no trailing fractional zeros (PostgreSQL's numeric text has no exponent).
function amount(text: string): string {
  if (!text.includes('.')) return /^0+$/.test(text) ? '0' : text;
  const cut = text.replace(/0+$/, '').replace(/\.$/, '');
  return /^0*$/.test(cut) ? '0' : cut;
}

export function shape(row: Row): Row {
  const [workflowName, workflowNameTruncated] = shorten(row.workflow_name, WORKFLOW_NAME_LENGTH);
  const out: Row = {
    id: row.id,
    instanceId: row.instance_id,
    instanceName: shorten(row.instance_name, LABEL_LENGTH)[0],
    workflowId: row.workflow_id,
    workflowName,
    workflowNameTruncated,
    sourceId: shorten(row.source_id, LABEL_LENGTH)[0],
    sourceWorkflowId: shorten(row.source_workflow_id, LABEL_LENGTH)[0],
    status: row.status,
    startedAt: row.started_at,
    createdAt: row.created_at,
    stoppedAt: row.stopped_at,
    durationMs: row.duration_ms,
    observedAt: row.observed_at,
    sourceMissing: row.source_missing,
  };
  if (row.cost_state === 1) {
    out.cost = null;
  } else if (row.cost_state === 2) {
    out.cost = {
      amount: amount(row.cost_amount),
      currency: 'USD',
      kind: 'estimated',
      basis: 'openrouter',
    };
  }
  if (row.cc_state !== null) {
    const coverage: Row = {
      state: row.cc_state,
      pricedComponents: row.cc_priced,
      unresolvedComponents: row.cc_unresolved,
      excludedComponents: row.cc_excluded,
      observations: row.cc_observations,
    };
    if (row.cc_missing_mapping !== null) {
      coverage.missingMappingObservations = row.cc_missing_mapping;
    }
    out.costCoverage = coverage;
  }
  return out;
}
