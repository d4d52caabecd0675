'use strict';
// The contract's model as docs/spec.md states it: statuses and their tables
// (§1.1-§1.3), errors (§1.5), limits (§1.7), and the checks of input that
// need no stored run (BAD, and step 1 of §1.6).

const RUN_STATUSES = ['queued', 'running', 'waiting', 'success', 'failed', 'denied', 'timeout', 'canceled', 'interrupted'];
const TERMINAL = new Set(['success', 'failed', 'denied', 'timeout', 'canceled', 'interrupted']);
// §1.2: every pair not listed, a status to itself included, is forbidden.
const RUN_TABLE = {
  queued: ['running', 'canceled'],
  running: ['waiting', 'success', 'failed', 'denied', 'timeout', 'canceled', 'interrupted'],
  waiting: ['running', 'canceled'],
};
// §1.3: steps and hosts share one table, and have the statuses it names.
const STEP_STATUSES = ['queued', 'running', 'success', 'failed', 'skipped', 'canceled', 'interrupted'];
const STEP_TABLE = {
  queued: ['running', 'skipped', 'canceled'],
  running: ['success', 'failed', 'skipped', 'canceled', 'interrupted'],
};
const STEP_TERMINAL = new Set(['success', 'failed', 'skipped', 'canceled', 'interrupted']);
// FSM-006: input aliases of queued, exactly so, in lower case.
const ALIASES = { created: 'queued', pending: 'queued' };
const NEEDS_DIAGNOSTIC = new Set(['failed', 'denied', 'timeout']);
const ACTOR_KINDS = new Set(['worker', 'recovery', 'operator']);

const LIMITS = {
  runId: 128,
  workflowName: 256,
  message: 4096,
  reason: 1024,
  labels: 32,
  labelKey: 63,
  labelValue: 256,
  steps: 256,
  stepName: 256,
  hostsPerStep: 256,
  hostsPerRun: 1024,
  hostName: 256,
  outputSummary: 4096,
  hostError: 1024,
  errorCode: 128,
  source: 256,
  details: 32,
  detailKey: 63,
  detailValue: 1024,
  worker: 256,
  incarnation: 256,
  actorId: 256,
  priority: 1000000,
  pageMax: 1000,
  pageDefault: 100,
  batchMax: 1000,
  ttlMaxMicros: 24n * 3600n * 1000000n,
};

const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const LABEL_KEY_RE = /^[A-Za-z0-9._:\/-]{1,63}$/;

// StoreError is a contract error (spec §1.5): its code is its identity.
class StoreError extends Error {
  constructor(code, message, details = {}) {
    super(message);
    this.code = code;
    Object.assign(this, details);
  }
}

const invalid = (field, message) => new StoreError('INVALID_ARGUMENT', `invalid ${field}: ${message}`, { field });

function bytes(s) {
  return Buffer.byteLength(s, 'utf8');
}

// text checks one string field: NUL (BAD-006), its length in bytes, and,
// when required, that it is neither empty nor blank.
function text(value, field, max, { required = false } = {}) {
  const s = value ?? '';
  if (s.includes('\0')) throw invalid(field, 'contains a NUL byte');
  if (bytes(s) > max) throw invalid(field, `is ${bytes(s)} bytes, more than ${max}`);
  if (required && s.trim() === '') throw invalid(field, s === '' ? 'is required' : 'is blank');
  return s;
}

function runId(value, field = 'run_id') {
  const s = value ?? '';
  if (!ID_RE.test(s)) {
    throw invalid(field, s === '' ? 'is required' : 'must be 1-128 characters of A-Z a-z 0-9 . _ : -');
  }
  return s;
}

// int reads an int64 that arrives as a decimal string (longs: String). A
// value beyond what a Number holds exactly is ±Infinity: it is no stored
// version, token or sequence number, and no limit admits it.
function int(value) {
  if (value === undefined || value === null || value === '') return 0;
  const n = BigInt(value);
  if (n > BigInt(Number.MAX_SAFE_INTEGER)) return Infinity;
  if (n < BigInt(Number.MIN_SAFE_INTEGER)) return -Infinity;
  return Number(n);
}

function runStatus(value, field = 'status') {
  const s = ALIASES[value] ?? value;
  if (!RUN_STATUSES.includes(s)) throw invalid(field, `unknown status ${JSON.stringify(value)}`);
  return s;
}

function stepStatus(value, field) {
  const s = ALIASES[value] ?? value;
  if (!STEP_STATUSES.includes(s)) throw invalid(field, `unknown status ${JSON.stringify(value)}`);
  return s;
}

function priority(value) {
  const p = int(value);
  if (!Number.isInteger(p) || p < -LIMITS.priority || p > LIMITS.priority) {
    throw invalid('priority', `must be between -${LIMITS.priority} and ${LIMITS.priority}`);
  }
  return p;
}

function labels(map, field = 'labels') {
  const entries = Object.entries(map ?? {});
  if (entries.length > LIMITS.labels) throw invalid(field, `has ${entries.length} entries, more than ${LIMITS.labels}`);
  const out = {};
  for (const [k, v] of entries) {
    if (!LABEL_KEY_RE.test(k)) throw invalid(`${field} key`, `${JSON.stringify(k)} must be 1-63 characters of A-Z a-z 0-9 . _ : - /`);
    out[k] = text(v, `${field}[${k}]`, LIMITS.labelValue);
  }
  return out;
}

// actor reads an Actor: an absent one is an empty one, an empty kind is an
// operator (AUD-008), any other kind is refused (BAD-007).
function actor(a) {
  const kind = a?.kind ?? '';
  if (kind !== '' && !ACTOR_KINDS.has(kind)) throw invalid('actor.kind', `unknown actor kind ${JSON.stringify(kind)}`);
  return {
    kind: kind === '' ? 'operator' : kind,
    id: text(a?.id, 'actor.id', LIMITS.actorId),
    principal: text(a?.principal, 'actor.principal', LIMITS.actorId),
  };
}

function diagnostic(d) {
  const details = Object.entries(d.details ?? {});
  if (details.length > LIMITS.details) throw invalid('diagnostic.details', `has ${details.length} entries, more than ${LIMITS.details}`);
  const out = {};
  for (const [k, v] of details) {
    text(k, 'diagnostic.details key', LIMITS.detailKey, { required: true });
    out[k] = text(v, `diagnostic.details[${k}]`, LIMITS.detailValue);
  }
  return {
    error_code: text(d.error_code, 'diagnostic.error_code', LIMITS.errorCode),
    message: text(d.message, 'diagnostic.message', LIMITS.message),
    retryable: Boolean(d.retryable),
    source_step: text(d.source_step, 'diagnostic.source_step', LIMITS.source),
    source_host: text(d.source_host, 'diagnostic.source_host', LIMITS.source),
    details: out,
  };
}

function owner(o) {
  return {
    worker: text(o?.worker, 'owner.worker', LIMITS.worker, { required: true }),
    incarnation: text(o?.incarnation, 'owner.incarnation', LIMITS.incarnation),
  };
}

// ttl reads a Duration as microseconds: more than 0, at most 24 h (BAD-004).
function ttl(d) {
  const nanos = BigInt(d?.seconds ?? 0) * 1000000000n + BigInt(d?.nanos ?? 0);
  if (nanos <= 0n) throw invalid('ttl', 'must be more than 0');
  if (nanos > LIMITS.ttlMaxMicros * 1000n) throw invalid('ttl', 'must be at most 24h');
  const micros = nanos / 1000n;
  return micros === 0n ? 1n : micros;
}

function token(value, field = 'token') {
  const t = int(value);
  if (!(t > 0)) throw invalid(field, 'must be more than 0');
  return t;
}

function pageLimit(value) {
  const n = int(value);
  if (!Number.isInteger(n) || n < 0 || n > LIMITS.pageMax) throw invalid('limit', `must be 0-${LIMITS.pageMax}`);
  return n === 0 ? LIMITS.pageDefault : n;
}

// filterStatuses reads a status filter; empty means `dflt`.
function filterStatuses(list, dflt, { nonTerminal = false, only = null } = {}) {
  if (!list || list.length === 0) return new Set(dflt);
  const out = new Set();
  for (const s of list) {
    const st = runStatus(s, 'statuses');
    if (nonTerminal && TERMINAL.has(st)) throw invalid('statuses', `${st} is terminal: no run in it is runnable`);
    if (only && !only.includes(st)) throw invalid('filter.statuses', `${st}: a claim that starts its runs claims only ${only.join(' or ')} ones`);
    out.add(st);
  }
  return out;
}

module.exports = {
  RUN_STATUSES, TERMINAL, RUN_TABLE, STEP_STATUSES, STEP_TABLE, STEP_TERMINAL, NEEDS_DIAGNOSTIC, LIMITS,
  StoreError, invalid, text, runId, int, runStatus, stepStatus, priority, labels, actor, diagnostic, owner, ttl,
  token, pageLimit, filterStatuses,
};
