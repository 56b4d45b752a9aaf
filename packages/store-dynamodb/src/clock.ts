/**
 * What a store measured of DynamoDB's clock, from the HTTP `Date` header of its replies: `offsetMs` to add to this
 * process's clock (`now`) to read the service's, within ± `uncertaintyMs`. When every reply is consistent with this
 * process's clock (the offset's interval holds 0), `offsetMs` is 0: the header has whole seconds, `now` has
 * milliseconds; otherwise it is the middle of the interval.
 */
export interface ClockOffset {
  readonly offsetMs: number;
  readonly uncertaintyMs: number;
  /** This process's clock (`now`) at the first sample of the current estimate (ms). */
  readonly measuredAtMs: number;
}

/** How long samples are intersected before the estimate starts again from one sample (clocks drift). */
const WINDOW_MS = 60_000;

/**
 * The offset of the service's clock, measured from replies. A reply sent between this process's `sentAt` and
 * `receivedAt` carries a `Date` of whole seconds `D`: the service's clock then read between `D` and `D + 1000`, so
 * the offset lies in `[D - receivedAt, D + 1000 - sentAt]`. Samples within a minute are intersected (the interval
 * narrows to the round trip); a sample outside the current interval (the process's clock jumped) starts it again.
 */
export class ServiceClock {
  #lo = 0;
  #hi = 0;
  #since = Number.NaN;

  /** Counts one reply (`date`: its `Date` header; ignored when absent or unreadable). */
  sample(date: unknown, sentAt: number, receivedAt: number): void {
    if (typeof date !== 'string') return;
    const at = Date.parse(date);
    if (!Number.isFinite(at) || !(receivedAt >= sentAt)) return;
    const lo = at - receivedAt;
    const hi = at + 1000 - sentAt;
    const fresh = Number.isNaN(this.#since) || receivedAt - this.#since > WINDOW_MS || lo > this.#hi || hi < this.#lo;
    if (fresh) {
      [this.#lo, this.#hi, this.#since] = [lo, hi, receivedAt];
      return;
    }
    this.#lo = Math.max(this.#lo, lo);
    this.#hi = Math.min(this.#hi, hi);
  }

  /** The estimate, or `undefined` before the first reply. */
  offset(): ClockOffset | undefined {
    if (Number.isNaN(this.#since)) return undefined;
    const offsetMs = this.#lo <= 0 && this.#hi >= 0 ? 0 : Math.round((this.#lo + this.#hi) / 2);
    return {
      offsetMs,
      uncertaintyMs: Math.ceil(Math.max(offsetMs - this.#lo, this.#hi - offsetMs)),
      measuredAtMs: this.#since,
    };
  }
}
