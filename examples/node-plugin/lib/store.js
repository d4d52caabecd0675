'use strict';
// An in-memory runstate store, written from docs/spec.md. Every method runs
// to its end without yielding (Node.js runs one call at a time), so each
// write is atomic: a write decides on a copy of the run and commits it, with
// its events and lease, in one step, or throws and leaves nothing behind.
//
// Requests arrive as the wire's messages (field names of
// protocol/pb/runstate.proto, int64 as decimal strings); answers are
// internal records that wire.js turns into messages. Times are BigInt
// microseconds since the epoch.

const crypto = require('node:crypto');
const M = require('./model');
const { StoreError, invalid, LIMITS, TERMINAL } = M;

const DEFAULT_CLAIMABLE = ['queued', 'waiting'];

// ULIDs (RUN-001): 48 bits of milliseconds and 80 random bits, Crockford base32.
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
function ulid(millis) {
  let out = '';
  let t = BigInt(millis);
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[Number(t % 32n)] + out;
    t /= 32n;
  }
  const rnd = crypto.randomBytes(16);
  for (let i = 0; i < 16; i++) out += CROCKFORD[rnd[i] % 32];
  return out;
}

const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
// ListRuns order (LIST-005): created_at, then run_id.
const listOrder = (a, b) => cmp(a.created_at, b.created_at) || cmp(a.run_id, b.run_id);
// Claim order (LEASE-003): highest priority, then oldest, then smallest run_id.
const claimOrder = (a, b) => cmp(b.priority, a.priority) || cmp(a.created_at, b.created_at) || cmp(a.run_id, b.run_id);

class Store {
  constructor(clock) {
    this.clock = clock;
    this.runs = new Map(); // run_id -> {run, events, lease, lastToken}
  }

  now() {
    return this.clock.nowMicros();
  }

  record(id) {
    const rec = this.runs.get(id);
    if (!rec) throw new StoreError('NOT_FOUND', `run ${id} not found`, { run_id: id });
    return rec;
  }

  // ---- create (RUN, AUD-001, BATCH-001…003) ----

  prepareCreate(req) {
    const status = req.status ?? '';
    if (status !== '' && M.runStatus(status) !== 'queued') {
      throw invalid('status', `a run is created queued, not ${status}`);
    }
    const steps = [];
    let hostCount = 0;
    const specs = req.steps ?? [];
    if (specs.length > LIMITS.steps) throw invalid('steps', `${specs.length} steps, more than ${LIMITS.steps}`);
    const stepNames = new Set();
    for (const sp of specs) {
      const name = M.text(sp.name, 'step name', LIMITS.stepName, { required: true });
      if (stepNames.has(name)) throw invalid('steps', `step ${JSON.stringify(name)} appears twice`);
      stepNames.add(name);
      const hosts = sp.hosts ?? [];
      if (hosts.length > LIMITS.hostsPerStep) throw invalid('hosts', `${hosts.length} hosts in step ${name}, more than ${LIMITS.hostsPerStep}`);
      hostCount += hosts.length;
      if (hostCount > LIMITS.hostsPerRun) throw invalid('hosts', `more than ${LIMITS.hostsPerRun} hosts in the run`);
      const hostNames = new Set();
      const hs = [];
      for (const h of hosts) {
        const hn = M.text(h, 'host name', LIMITS.hostName, { required: true });
        if (hostNames.has(hn)) throw invalid('hosts', `host ${JSON.stringify(hn)} appears twice in step ${JSON.stringify(name)}`);
        hostNames.add(hn);
        hs.push(newHost(hn));
      }
      steps.push({ ...newStep(name), hosts: hs });
    }
    return {
      run_id: req.run_id ? M.runId(req.run_id) : '',
      workflow_name: M.text(req.workflow_name, 'workflow_name', LIMITS.workflowName, { required: true }),
      message: M.text(req.message, 'message', LIMITS.message),
      priority: M.priority(req.priority),
      labels: M.labels(req.labels),
      steps,
      retry_of: req.retry_of ? M.runId(req.retry_of, 'retry_of') : '',
      actor: M.actor(req.actor),
      reason: M.text(req.reason, 'reason', LIMITS.reason),
    };
  }

  // checkCreate decides what the store says about a prepared create: its
  // id taken, its retry_of (RUN-003, RUN-006). It returns the attempt.
  checkCreate(spec) {
    if (this.runs.has(spec.run_id)) {
      throw new StoreError('ALREADY_EXISTS', `run ${spec.run_id} already exists`, { run_id: spec.run_id });
    }
    if (spec.retry_of === '') return 1;
    const retried = this.runs.get(spec.retry_of);
    if (!retried) throw invalid('retry_of', `run ${spec.retry_of} does not exist`);
    if (!TERMINAL.has(retried.run.status)) {
      throw invalid('retry_of', `run ${spec.retry_of} is ${retried.run.status}: only a finished run can be retried`);
    }
    return retried.run.attempt + 1;
  }

  newId(now, taken) {
    for (;;) {
      const id = ulid(now / 1000n);
      if (!this.runs.has(id) && !taken.has(id)) return id;
    }
  }

  insert(spec, attempt, now) {
    const run = {
      run_id: spec.run_id,
      workflow_name: spec.workflow_name,
      status: 'queued',
      message: spec.message,
      priority: spec.priority,
      labels: spec.labels,
      created_at: now,
      updated_at: now,
      started_at: null,
      finished_at: null,
      version: 1,
      diagnostic: null,
      interrupted_reason: '',
      retry_of: spec.retry_of,
      attempt,
      steps: spec.steps,
    };
    const rec = { run, events: [], lease: null, lastToken: 0 };
    rec.events.push({
      run_id: run.run_id, seq: 1, kind: 'created', from: '', to: 'queued', time: now, actor: spec.actor,
      reason: spec.reason, error_code: '', version: 1, lease_token: 0,
    });
    this.runs.set(run.run_id, rec);
    return run;
  }

  createRun(req) {
    const spec = this.prepareCreate(req);
    const now = this.now();
    if (spec.run_id === '') spec.run_id = this.newId(now, new Set());
    const attempt = this.checkCreate(spec);
    return this.insert(spec, attempt, now);
  }

  createRuns(req) {
    const items = req.runs ?? [];
    batchSize(items.length, 'runs');
    const now = this.now();
    const specs = [];
    const seen = new Map();
    items.forEach((item, i) => {
      const spec = atItem(i, () => this.prepareCreate(item));
      if (spec.run_id !== '') {
        if (seen.has(spec.run_id)) {
          throw itemError(i, invalid('run_id', `items ${seen.get(spec.run_id)} and ${i} both create run ${spec.run_id}`));
        }
        seen.set(spec.run_id, i);
      }
      specs.push(spec);
    });
    const taken = new Set(seen.keys());
    const attempts = specs.map((spec, i) => {
      if (spec.run_id === '') {
        spec.run_id = this.newId(now, taken);
        taken.add(spec.run_id);
      }
      return atItem(i, () => this.checkCreate(spec));
    });
    // Every item is decided: store them all, stamped once.
    return specs.map((spec, i) => this.insert(spec, attempts[i], now));
  }

  getRun(req) {
    return this.record(M.runId(req.run_id)).run;
  }

  // ---- update (§1.6, FSM, CAS, DIAG, AUD, LEASE-006/019/022, BATCH-004/005) ----

  prepareUpdate(req) {
    const u = {
      run_id: M.runId(req.run_id),
      expected_version: M.int(req.expected_version),
      expected_text: String(req.expected_version ?? '0'), // exact, for the error
      lease_token: M.int(req.lease_token),
      status: req.status ? M.runStatus(req.status) : '',
      message: req.message !== undefined ? M.text(req.message, 'message', LIMITS.message) : undefined,
      priority: req.priority !== undefined ? M.priority(req.priority) : undefined,
      diagnostic: req.diagnostic ? M.diagnostic(req.diagnostic) : undefined,
      interrupted_reason: M.text(req.interrupted_reason, 'interrupted_reason', LIMITS.reason),
      labels: req.set_labels ? M.labels(req.labels) : undefined,
      steps: [],
      actor: M.actor(req.actor),
      reason: M.text(req.reason, 'reason', LIMITS.reason),
      release_lease: Boolean(req.release_lease),
    };
    if (!(u.expected_version >= 1)) throw invalid('expected_version', 'must be 1 or more: every update names the version it was based on');
    if (u.lease_token < 0) throw invalid('lease_token', 'must not be negative');
    if (u.release_lease && u.lease_token === 0) throw invalid('release_lease', 'needs the lease_token of the lease to release');
    if (u.interrupted_reason !== '' && u.status !== 'interrupted') {
      throw invalid('interrupted_reason', 'goes only with status interrupted');
    }
    const patches = req.steps ?? [];
    if (patches.length > LIMITS.steps) throw invalid('steps', `${patches.length} steps, more than ${LIMITS.steps}`);
    const stepNames = new Set();
    for (const sp of patches) {
      const name = M.text(sp.name, 'step name', LIMITS.stepName, { required: true });
      if (stepNames.has(name)) throw invalid('steps', `step ${JSON.stringify(name)} appears twice`);
      stepNames.add(name);
      const hostNames = new Set();
      const hosts = [];
      if ((sp.hosts ?? []).length > LIMITS.hostsPerStep) throw invalid('hosts', `more than ${LIMITS.hostsPerStep} hosts in step ${name}`);
      for (const hp of sp.hosts ?? []) {
        const host = M.text(hp.host, 'host name', LIMITS.hostName, { required: true });
        if (hostNames.has(host)) throw invalid('hosts', `host ${JSON.stringify(host)} appears twice in step ${JSON.stringify(name)}`);
        hostNames.add(host);
        hosts.push({
          host,
          status: hp.status ? M.stepStatus(hp.status, 'step status') : '',
          output_summary: hp.output_summary !== undefined ? M.text(hp.output_summary, 'output_summary', LIMITS.outputSummary) : undefined,
          error: hp.error !== undefined ? M.text(hp.error, 'host error', LIMITS.hostError) : undefined,
        });
      }
      u.steps.push({ name, status: sp.status ? M.stepStatus(sp.status, 'step status') : '', hosts });
    }
    const changes = u.status !== '' || u.message !== undefined || u.priority !== undefined || u.diagnostic !== undefined ||
      u.labels !== undefined || u.steps.length > 0;
    if (!changes) throw invalid('update', 'nothing to change');
    return u;
  }

  // applyUpdate decides a prepared update on its run (checks 2-8 of §1.6)
  // and commits what it writes. It returns the run, or throws the error
  // after committing what the refusal writes (checks 5 and 6).
  applyUpdate(u, now) {
    const rec = this.record(u.run_id); // 2
    const cur = rec.run;
    if (u.lease_token !== 0 && !fences(rec, u.lease_token)) { // 3
      throw new StoreError('LEASE_LOST', `lease token ${u.lease_token} of run ${u.run_id} is not its current one`, { run_id: u.run_id });
    }
    if (u.expected_version !== cur.version) { // 4
      throw new StoreError('VERSION_CONFLICT', `run ${u.run_id} is at version ${cur.version}, not ${u.expected_text}`, {
        run_id: u.run_id, expected_version: u.expected_text, current_version: cur.version,
      });
    }
    const event = (kind, from, to, version, errorCode) => ({
      run_id: u.run_id, seq: rec.events.length + 1, kind, from, to, time: now, actor: u.actor, reason: u.reason,
      error_code: errorCode, version, lease_token: u.lease_token,
    });
    const to = u.status || cur.status;
    const refusal = () => new StoreError('INVALID_STATE_TRANSITION', `run ${u.run_id}: invalid transition from ${cur.status} to ${to}`, {
      run_id: u.run_id, from: cur.status, to,
    });
    if (TERMINAL.has(cur.status)) { // 5: only the rejected event
      rec.events.push(event('rejected', cur.status, to, cur.version, 'INVALID_STATE_TRANSITION'));
      throw refusal();
    }
    if (u.status !== '' && !(M.RUN_TABLE[cur.status] ?? []).includes(u.status)) { // 6: rejected, then failed
      const run = structuredClone(cur);
      run.status = 'failed';
      run.diagnostic = {
        error_code: 'INVALID_STATE_TRANSITION', message: `invalid transition from ${cur.status} to ${u.status}`,
        retryable: false, source_step: '', source_host: '', details: {},
      };
      run.finished_at = now;
      run.updated_at = now;
      run.version = cur.version + 1;
      for (const step of run.steps) {
        if (step.status === 'running') Object.assign(step, { status: 'failed', finished_at: now });
        for (const host of step.hosts) {
          if (host.status === 'running') Object.assign(host, { status: 'failed', finished_at: now });
        }
      }
      rec.events.push(event('rejected', cur.status, u.status, cur.version, 'INVALID_STATE_TRANSITION'));
      rec.events.push(event('transition', cur.status, 'failed', run.version, 'INVALID_STATE_TRANSITION'));
      rec.run = run;
      throw refusal();
    }
    // 7: diagnostics.
    const missing = (field, msg) => new StoreError('MISSING_DIAGNOSTIC', `run ${u.run_id}: ${msg}`, { run_id: u.run_id, field });
    if (u.diagnostic && (u.diagnostic.error_code.trim() === '' || u.diagnostic.message.trim() === '')) {
      throw missing('diagnostic', 'a diagnostic needs a non-blank error_code and message');
    }
    if (M.NEEDS_DIAGNOSTIC.has(u.status) && !u.diagnostic) {
      throw missing('diagnostic', `a diagnostic (error_code, message, retryable) is required when entering ${u.status}`);
    }
    if (u.status === 'interrupted' && u.interrupted_reason.trim() === '') {
      throw missing('interrupted_reason', 'interrupted_reason is required when entering interrupted');
    }
    // 8: steps and hosts, on a copy.
    const run = structuredClone(cur);
    patchSteps(run, u, now);
    // Everything is decided: apply the rest of the write.
    if (u.status !== '') {
      run.status = u.status;
      if (u.status === 'running' && run.started_at === null) run.started_at = now;
      if (TERMINAL.has(u.status)) run.finished_at = now;
      if (u.status === 'interrupted') run.interrupted_reason = u.interrupted_reason;
    }
    if (u.message !== undefined) run.message = u.message;
    if (u.priority !== undefined) run.priority = u.priority;
    if (u.diagnostic !== undefined) run.diagnostic = u.diagnostic;
    if (u.labels !== undefined) run.labels = u.labels;
    run.version = cur.version + 1;
    run.updated_at = now;
    if (u.status !== '') {
      rec.events.push(event('transition', cur.status, u.status, run.version, u.diagnostic?.error_code ?? ''));
    }
    rec.run = run;
    if (u.release_lease) rec.lease.released = true; // LEASE-022: in the update's own write
    return run;
  }

  updateRun(req) {
    const u = this.prepareUpdate(req);
    return this.applyUpdate(u, this.now());
  }

  // updateRuns answers each item with a run or an error (BATCH-004); a
  // batch that names one run twice is refused whole (BATCH-005).
  updateRuns(req) {
    const items = req.updates ?? [];
    batchSize(items.length, 'updates');
    const first = new Map();
    items.forEach((item, i) => {
      const id = item.run_id ?? '';
      if (first.has(id)) {
        throw itemError(i, invalid('updates', `items ${first.get(id)} and ${i} both update run ${id}`));
      }
      first.set(id, i);
    });
    const now = this.now();
    return items.map((item) => {
      try {
        return { run: this.applyUpdate(this.prepareUpdate(item), now) };
      } catch (err) {
        if (!(err instanceof StoreError)) throw err;
        return { error: err };
      }
    });
  }

  // ---- audit (AUD-006) ----

  listAuditEvents(req) {
    const id = M.runId(req.run_id);
    const after = M.int(req.after_seq);
    if (!(after >= 0)) throw invalid('after_seq', 'must not be negative');
    const limit = M.pageLimit(req.limit);
    const rec = this.record(id);
    const rest = rec.events.slice(Math.min(after, rec.events.length));
    return { events: rest.slice(0, limit), more: rest.length > limit };
  }

  // ---- listings (LIST, LEASE-010/020/023) ----

  listRuns(req) {
    const statuses = M.filterStatuses(req.statuses, M.RUN_STATUSES);
    const workflow = workflowFilter(req.workflow_name);
    const want = M.labels(req.labels);
    const from = req.created_from ? micros(req.created_from) : null;
    const before = req.created_before ? micros(req.created_before) : null;
    if (from !== null && before !== null && nanos(req.created_from) >= nanos(req.created_before)) {
      throw invalid('created range', 'created_from is not before created_before: the range [created_from, created_before) is empty');
    }
    const limit = M.pageLimit(req.limit);
    const after = req.cursor ? this.readCursor(req.cursor, 'runs') : null;
    const runs = [];
    for (const { run } of this.runs.values()) {
      if (!statuses.has(run.status) || (workflow && run.workflow_name !== workflow) || !hasLabels(run, want)) continue;
      if ((from !== null && run.created_at < from) || (before !== null && run.created_at >= before)) continue;
      if (after && listOrder(run, { created_at: after[0], run_id: after[1] }) <= 0) continue;
      runs.push(run);
    }
    return this.page(runs.sort(listOrder), limit, 'runs', (r) => [String(r.created_at), r.run_id]);
  }

  listRunnableRuns(req) {
    const match = this.runnableFilter(req.filter, {});
    const limit = M.pageLimit(req.limit);
    const after = req.cursor ? this.readCursor(req.cursor, 'runnable') : null;
    const now = this.now();
    const pos = after && { priority: after[0], created_at: after[1], run_id: after[2] };
    const runs = [];
    for (const rec of this.runs.values()) {
      if (!match(rec.run) || live(rec.lease, now)) continue;
      if (pos && claimOrder(rec.run, pos) <= 0) continue;
      runs.push(rec.run);
    }
    return this.page(runs.sort(claimOrder), limit, 'runnable', (r) => [r.priority, String(r.created_at), r.run_id]);
  }

  page(sorted, limit, kind, position) {
    const runs = sorted.slice(0, limit);
    const next = sorted.length > limit ? this.issueCursor(kind, position(runs[runs.length - 1])) : '';
    return { runs, next_cursor: next };
  }

  // Cursors. docs/protocol.md calls them opaque, but the host's client
  // checks every cursor before it sends it, and passes only the kit's own
  // layout (found by watching the reference plugins' answers): unpadded
  // base64url of "runs.v1|CREATED_MICROS|RUN_ID" or
  // "runnable.v1|PRIORITY|CREATED_MICROS|RUN_ID", the position of the last
  // run of the page. The store checks them once more on its side.
  issueCursor(kind, position) {
    return Buffer.from([`${kind}.v1`, ...position].join('|')).toString('base64url');
  }

  readCursor(cursor, kind) {
    const parts = Buffer.from(String(cursor), 'base64url').toString().split('|');
    const ints = parts.slice(1, -1);
    if (parts[0] === `${kind}.v1` && parts.length === (kind === 'runs' ? 3 : 4) &&
        ints.every((n) => /^-?\d{1,20}$/.test(n)) && /^[A-Za-z0-9._:-]{1,128}$/.test(parts[parts.length - 1])) {
      return ints.map((n, i) => (kind === 'runnable' && i === 0 ? Number(n) : BigInt(n))).concat(parts[parts.length - 1]);
    }
    throw invalid('cursor', 'is not a cursor this listing returned; pass next_cursor back unchanged, with the same filters');
  }

  // runnableFilter reads a RunnableFilter (LEASE-011: queued and waiting
  // unless named; a terminal status is refused).
  runnableFilter(f, { only = null }) {
    const statuses = M.filterStatuses(f?.statuses, DEFAULT_CLAIMABLE, { nonTerminal: true, only });
    const workflow = workflowFilter(f?.workflow_name);
    const want = M.labels(f?.labels);
    return (run) => statuses.has(run.status) && (!workflow || run.workflow_name === workflow) && hasLabels(run, want);
  }

  // ---- leases (LEASE) ----

  claimRun(req) {
    const id = M.runId(req.run_id);
    const who = M.owner(req.owner);
    const ttl = M.ttl(req.ttl);
    const statuses = M.filterStatuses(req.statuses, DEFAULT_CLAIMABLE, { nonTerminal: true });
    const rec = this.record(id);
    const now = this.now();
    if (TERMINAL.has(rec.run.status)) {
      throw new StoreError('NOT_CLAIMABLE', `run ${id} is ${rec.run.status}: a finished run is not claimable`, { run_id: id });
    }
    if (!statuses.has(rec.run.status)) {
      throw new StoreError('NOT_CLAIMABLE', `run ${id} is ${rec.run.status}, not a status the claim allows`, { run_id: id });
    }
    if (!claimableBy(rec.lease, who, now)) {
      throw new StoreError('LEASE_HELD', `run ${id} is held by another owner until its lease expires`, { run_id: id });
    }
    return { lease: grant(rec, who, ttl, now), run: rec.run };
  }

  claimNextRun(req) {
    const who = M.owner(req.owner);
    const ttl = M.ttl(req.ttl);
    const match = this.runnableFilter(req.filter, {});
    const now = this.now();
    const rec = this.next(match, who, now, 1)[0];
    if (!rec) throw new StoreError('NOT_FOUND', 'no run is runnable');
    return { lease: grant(rec, who, ttl, now), run: rec.run };
  }

  // next returns up to n records claim-next would take, in claim order.
  next(match, who, now, n) {
    const found = [];
    for (const rec of this.runs.values()) {
      if (!TERMINAL.has(rec.run.status) && match(rec.run) && claimableBy(rec.lease, who, now)) found.push(rec);
    }
    return found.sort((a, b) => claimOrder(a.run, b.run)).slice(0, n);
  }

  // claimRuns claims up to max runs in claim order, each with its own
  // lease, and with start moves each to running in the claim's write
  // (BATCH-006…009).
  claimRuns(req) {
    const who = M.owner(req.owner);
    const ttl = M.ttl(req.ttl);
    const max = M.int(req.max);
    if (!Number.isInteger(max) || max < 1 || max > LIMITS.batchMax) throw invalid('max', `must be 1-${LIMITS.batchMax}`);
    const start = Boolean(req.start);
    const match = this.runnableFilter(req.filter, { only: start ? DEFAULT_CLAIMABLE : null });
    const actor = M.actor(req.actor);
    const reason = M.text(req.reason, 'reason', LIMITS.reason);
    const now = this.now();
    return this.next(match, who, now, max).map((rec) => {
      const lease = grant(rec, who, ttl, now);
      if (start) {
        const cur = rec.run;
        const run = { ...structuredClone(cur), status: 'running', version: cur.version + 1, updated_at: now };
        if (run.started_at === null) run.started_at = now;
        rec.events.push({
          run_id: run.run_id, seq: rec.events.length + 1, kind: 'transition', from: cur.status, to: 'running', time: now,
          actor, reason, error_code: '', version: run.version, lease_token: lease.token,
        });
        rec.run = run;
      }
      return { lease, run: rec.run };
    });
  }

  renewLease(req) {
    const id = M.runId(req.run_id);
    const tok = M.token(req.token);
    const ttl = M.ttl(req.ttl);
    const rec = this.record(id);
    if (!fences(rec, tok)) throw lost(id, tok);
    // LEASE-004, LEASE-015: now + TTL, same owner and token, even once expired
    // if nobody claimed the run since.
    rec.lease.expires_at = this.now() + ttl;
    return lease(rec);
  }

  releaseLease(req) {
    const id = M.runId(req.run_id);
    const tok = M.token(req.token);
    const rec = this.record(id);
    if (!fences(rec, tok)) throw lost(id, tok);
    rec.lease.released = true;
  }

  // getLease: the last lease issued, released or expired (LEASE-021).
  getLease(req) {
    const id = M.runId(req.run_id);
    const rec = this.record(id);
    return rec.lease ? lease(rec) : { run_id: id, token: 0 };
  }
}

// workflowFilter reads a workflow-name filter: empty is none, blank is refused.
function workflowFilter(value) {
  const s = value ?? '';
  return s === '' ? '' : M.text(s, 'workflow_name', LIMITS.workflowName, { required: true });
}

function newStep(name) {
  return { name, status: 'queued', started_at: null, finished_at: null, hosts: [] };
}

function newHost(host) {
  return { host, status: 'queued', output_summary: '', error: '', started_at: null, finished_at: null };
}

// move moves a step or host along the step table (FSM-007, FSM-008),
// stamping its start and finish with the write's time (FSM-009).
function move(thing, to, now, where) {
  if (to === '') return;
  if (!(M.STEP_TABLE[thing.status] ?? []).includes(to)) {
    const what = where.host !== undefined ? `host ${where.host} of step ${where.step}` : `step ${where.step}`;
    throw new StoreError('INVALID_STATE_TRANSITION', `run ${where.run_id}: ${what}: invalid transition from ${thing.status} to ${to}`, {
      ...where, from: thing.status, to,
    });
  }
  thing.status = to;
  if (to === 'running' && thing.started_at === null) thing.started_at = now;
  if (M.STEP_TERMINAL.has(to)) thing.finished_at = now;
}

// patchSteps applies an update's step and host patches to a copy of the run
// (RUN-009): unknown steps and hosts are added queued, then moved.
function patchSteps(run, u, now) {
  for (const sp of u.steps) {
    let step = run.steps.find((s) => s.name === sp.name);
    if (!step) {
      step = newStep(sp.name);
      run.steps.push(step);
    }
    move(step, sp.status, now, { run_id: run.run_id, step: sp.name });
    for (const hp of sp.hosts) {
      let host = step.hosts.find((h) => h.host === hp.host);
      if (!host) {
        host = newHost(hp.host);
        step.hosts.push(host);
      }
      move(host, hp.status, now, { run_id: run.run_id, step: sp.name, host: hp.host });
      if (hp.output_summary !== undefined) host.output_summary = hp.output_summary;
      if (hp.error !== undefined) host.error = hp.error;
    }
  }
  if (run.steps.length > LIMITS.steps) throw invalid('steps', `the run would have ${run.steps.length} steps, more than ${LIMITS.steps}`);
  let hosts = 0;
  for (const step of run.steps) {
    if (step.hosts.length > LIMITS.hostsPerStep) throw invalid('hosts', `step ${step.name} would have more than ${LIMITS.hostsPerStep} hosts`);
    hosts += step.hosts.length;
  }
  if (hosts > LIMITS.hostsPerRun) throw invalid('hosts', `the run would have more than ${LIMITS.hostsPerRun} hosts`);
}

// A lease is live while the store's time is before its expires_at
// (LEASE-018), and only until it is released.
function live(l, now) {
  return l !== null && !l.released && now < l.expires_at;
}

// claimableBy: no live lease, or one of another incarnation of the same
// worker (LEASE-012).
function claimableBy(l, who, now) {
  return !live(l, now) || (l.owner.worker === who.worker && l.owner.incarnation !== who.incarnation);
}

// fences: the run's current, unreleased token, expired or not (LEASE-015).
function fences(rec, tok) {
  return rec.lease !== null && !rec.lease.released && rec.lease.token === tok;
}

function grant(rec, who, ttl, now) {
  rec.lastToken += 1; // LEASE-016: larger than every earlier token of the run
  rec.lease = { owner: who, token: rec.lastToken, acquired_at: now, expires_at: now + ttl, released: false };
  return lease(rec);
}

function lease(rec) {
  const l = rec.lease;
  return { run_id: rec.run.run_id, owner: l.owner, token: l.token, acquired_at: l.acquired_at, expires_at: l.expires_at };
}

function lost(id, tok) {
  return new StoreError('LEASE_LOST', `lease token ${tok} of run ${id} is stale or released`, { run_id: id });
}

function hasLabels(run, want) {
  for (const [k, v] of Object.entries(want)) if (run.labels[k] !== v) return false;
  return true;
}

// micros reads a bound of the created range as microseconds, rounded up:
// a run created at t is within [from, before) exactly when from <= t < before.
function micros(ts) {
  const n = nanos(ts);
  const q = n / 1000n;
  return q * 1000n < n ? q + 1n : q;
}

function nanos(ts) {
  return BigInt(ts.seconds ?? 0) * 1000000000n + BigInt(ts.nanos ?? 0);
}

function batchSize(n, field) {
  if (n < 1) throw invalid(field, 'an empty batch');
  if (n > LIMITS.batchMax) throw invalid(field, `${n} items, more than ${LIMITS.batchMax}`);
}

function itemError(i, err) {
  err.batch_index = i;
  return err;
}

function atItem(i, fn) {
  try {
    return fn();
  } catch (err) {
    if (err instanceof StoreError) throw itemError(i, err);
    throw err;
  }
}

module.exports = { Store, ulid };
