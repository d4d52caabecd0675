'use strict';
// What docs/protocol.md says travels: records as messages (times as
// google.protobuf.Timestamp to the microsecond, absent when unset; int64 as
// decimal strings), and errors as a gRPC status carrying an ErrorDetail in
// grpc-status-details-bin.

const grpc = require('@grpc/grpc-js');
const { StoreError } = require('./model');

function timestamp(micros) {
  if (micros === null || micros === undefined) return undefined;
  let seconds = micros / 1000000n;
  let rest = micros % 1000000n;
  if (rest < 0n) {
    rest += 1000000n;
    seconds -= 1n;
  }
  return { seconds: String(seconds), nanos: Number(rest) * 1000 };
}

function timestampNanos(ts) {
  return BigInt(ts?.seconds ?? 0) * 1000000000n + BigInt(ts?.nanos ?? 0);
}

function timestampOfNanos(nanos) {
  let seconds = nanos / 1000000000n;
  let rest = nanos % 1000000000n;
  if (rest < 0n) {
    rest += 1000000000n;
    seconds -= 1n;
  }
  return { seconds: String(seconds), nanos: Number(rest) };
}

function host(h) {
  return {
    host: h.host, status: h.status, output_summary: h.output_summary, error: h.error,
    started_at: timestamp(h.started_at), finished_at: timestamp(h.finished_at),
  };
}

function run(r) {
  return {
    run_id: r.run_id,
    workflow_name: r.workflow_name,
    status: r.status,
    message: r.message,
    priority: String(r.priority),
    labels: { ...r.labels },
    created_at: timestamp(r.created_at),
    updated_at: timestamp(r.updated_at),
    started_at: timestamp(r.started_at),
    finished_at: timestamp(r.finished_at),
    version: String(r.version),
    diagnostic: r.diagnostic ? { ...r.diagnostic, details: { ...r.diagnostic.details } } : undefined,
    interrupted_reason: r.interrupted_reason,
    retry_of: r.retry_of,
    attempt: String(r.attempt),
    steps: r.steps.map((s) => ({
      name: s.name, status: s.status, started_at: timestamp(s.started_at), finished_at: timestamp(s.finished_at),
      hosts: s.hosts.map(host),
    })),
  };
}

function event(e) {
  return {
    run_id: e.run_id, seq: String(e.seq), kind: e.kind, from: e.from, to: e.to, time: timestamp(e.time),
    actor: { ...e.actor }, reason: e.reason, error_code: e.error_code, version: String(e.version),
    lease_token: String(e.lease_token),
  };
}

function lease(l) {
  if (l.token === 0) return { run_id: l.run_id, token: '0' }; // never claimed: no owner, no times
  return {
    run_id: l.run_id, owner: { ...l.owner }, token: String(l.token),
    acquired_at: timestamp(l.acquired_at), expires_at: timestamp(l.expires_at),
  };
}

function claim(c) {
  return { lease: lease(c.lease), run: run(c.run) };
}

function page(p) {
  return { runs: p.runs.map(run), next_cursor: p.next_cursor };
}

// ---- errors ----

// The gRPC code closest to each contract code (docs/protocol.md, "Errors").
const GRPC_CODES = {
  NOT_FOUND: grpc.status.NOT_FOUND,
  ALREADY_EXISTS: grpc.status.ALREADY_EXISTS,
  VERSION_CONFLICT: grpc.status.ABORTED,
  INVALID_STATE_TRANSITION: grpc.status.FAILED_PRECONDITION,
  MISSING_DIAGNOSTIC: grpc.status.FAILED_PRECONDITION,
  LEASE_HELD: grpc.status.FAILED_PRECONDITION,
  LEASE_LOST: grpc.status.FAILED_PRECONDITION,
  NOT_CLAIMABLE: grpc.status.FAILED_PRECONDITION,
  UNSUPPORTED: grpc.status.FAILED_PRECONDITION,
  INVALID_ARGUMENT: grpc.status.INVALID_ARGUMENT,
  UNAVAILABLE: grpc.status.UNAVAILABLE,
  PERMISSION_DENIED: grpc.status.PERMISSION_DENIED,
  UNAUTHENTICATED: grpc.status.UNAUTHENTICATED,
};

// errorDetail is the ErrorDetail message of a contract error, as an object.
function errorDetail(err) {
  const d = {
    code: err.code,
    message: err.message,
    run_id: err.run_id ?? '',
    field: err.field ?? '',
    from: err.from ?? '',
    to: err.to ?? '',
    step: err.step ?? '',
    host: err.host ?? '',
    expected_version: String(err.expected_version ?? 0),
    current_version: String(err.current_version ?? 0),
    cause: err.cause_text ?? '',
    context: '',
  };
  if (err.batch_index !== undefined) d.batch_index = String(err.batch_index);
  return d;
}

// A hand-made protobuf encoder for the two messages the status trailer
// holds (ErrorDetail, google.rpc.Status with its Any): grpc-js serializes
// only the messages of calls.
function varint(n) {
  let v = BigInt.asUintN(64, BigInt(n));
  const out = [];
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) b |= 0x80;
    out.push(b);
  } while (v !== 0n);
  return Buffer.from(out);
}
const tag = (field, wire) => varint((field << 3) | wire);
const lenField = (field, buf) => Buffer.concat([tag(field, 2), varint(buf.length), buf]);
const strField = (field, s) => (s ? lenField(field, Buffer.from(s, 'utf8')) : Buffer.alloc(0));
const intField = (field, n, always = false) => (always || BigInt(n) !== 0n ? Buffer.concat([tag(field, 0), varint(n)]) : Buffer.alloc(0));

function encodeErrorDetail(d) {
  return Buffer.concat([
    strField(1, d.code), strField(2, d.message), strField(3, d.run_id), strField(4, d.field), strField(5, d.from),
    strField(6, d.to), strField(7, d.step), strField(8, d.host), intField(9, d.expected_version),
    intField(10, d.current_version), strField(11, d.cause),
    d.batch_index !== undefined ? intField(12, d.batch_index, true) : Buffer.alloc(0), strField(13, d.context),
  ]);
}

const DETAIL_TYPE = 'type.googleapis.com/runstate.plugin.v1.ErrorDetail';

// statusError is what a grpc-js handler fails a call with: the contract
// error's code, its text, and the google.rpc.Status whose details hold the
// ErrorDetail (its code equal to the call's).
function statusError(err) {
  if (!(err instanceof StoreError)) {
    return { code: grpc.status.UNKNOWN, details: String(err?.stack ?? err) };
  }
  const code = GRPC_CODES[err.code] ?? grpc.status.UNKNOWN;
  const text = `runstate: ${err.message}`;
  const any = Buffer.concat([strField(1, DETAIL_TYPE), lenField(2, encodeErrorDetail(errorDetail(err)))]);
  const status = Buffer.concat([intField(1, code), strField(2, text), lenField(3, any)]);
  const metadata = new grpc.Metadata();
  metadata.set('grpc-status-details-bin', status);
  return { code, details: text, metadata };
}

module.exports = { run, event, lease, claim, page, errorDetail, statusError, timestampNanos, timestampOfNanos };
