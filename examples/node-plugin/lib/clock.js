'use strict';
// The store's one clock (docs/protocol.md, "The test clock"): real time, or,
// in test mode, a clock that stands still at RUNSTATE_PLUGIN_TEST_CLOCK and
// moves only by SetClock. Times are BigInt nanoseconds since the epoch; the
// store reads them to the microsecond.

const { StoreError } = require('./model');

class Clock {
  // testNanos: the test clock's start, or null for real time.
  constructor(testNanos = null) {
    this.test = testNanos !== null;
    this.nanos = testNanos;
    // Real time: the wall clock at start plus a monotonic offset, so that
    // the store's time never runs backwards.
    this.wall0 = BigInt(Date.now()) * 1000000n;
    this.mono0 = process.hrtime.bigint();
  }

  nowNanos() {
    return this.test ? this.nanos : this.wall0 + (process.hrtime.bigint() - this.mono0);
  }

  // nowMicros is the time the store stamps: microseconds, rounded down.
  nowMicros() {
    const n = this.nowNanos();
    return n >= 0n ? n / 1000n : -((-n + 999n) / 1000n);
  }

  // set moves the test clock to `nanos`, never backwards.
  set(nanos) {
    if (nanos < this.nanos) {
      throw new StoreError('INVALID_ARGUMENT', 'invalid to: the test clock never runs backwards', { field: 'to' });
    }
    this.nanos = nanos;
  }
}

// parseRFC3339 reads an RFC 3339 instant with up to nine fractional digits
// as BigInt nanoseconds, or returns null.
function parseRFC3339(s) {
  const m = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/.exec(s ?? '');
  if (!m) return null;
  const [, y, mo, d, h, mi, sec, frac, , sign, oh, om] = m;
  const ms = Date.UTC(+y, +mo - 1, +d, +h, +mi, +sec);
  const back = new Date(ms);
  if (Number.isNaN(ms) || back.getUTCDate() !== +d || back.getUTCMonth() !== +mo - 1 || +h > 23 || +mi > 59 || +sec > 59) return null;
  let nanos = BigInt(ms) * 1000000n + BigInt((frac ?? '').padEnd(9, '0') || '0');
  if (sign) {
    const offset = BigInt((+oh * 60 + +om) * 60) * 1000000000n;
    nanos = sign === '+' ? nanos - offset : nanos + offset;
  }
  return nanos;
}

module.exports = { Clock, parseRFC3339 };
