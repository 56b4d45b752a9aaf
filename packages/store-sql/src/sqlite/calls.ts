import {
  applyKeyFingerprintOffer,
  checkLeaseMs,
  type ClaimOptions,
  type ClaimResult,
  fleetKeysFull,
  type KeyFingerprint,
  parseKeyFingerprintOffer,
  type SpendOptions,
} from '@mrtr/core/store';
import {
  checkClaimArgs,
  checkClaimOptions,
  checkConsumeArgs,
  checkLeaseArgs,
  checkRecordArgs,
  checkRecordOwner,
  checkSpendOptions,
} from '../shared/arguments.js';
import { toStoreError } from '../shared/lifecycle.js';
import { inWriteTransaction } from './connection.js';
import type { Op, SqliteReplayContext } from './replay.js';
import type { Statements } from './statements.js';

/**
 * `consume`, `claim` and `record` (queued: one transaction per batch, judged by the store's clock, the `now` option,
 * and the ledger epoch there), `renew`, `release`, `ledgerEpoch` and `keyFingerprints` (one write transaction each) and
 * `time`.
 */
export function sqliteCalls(ctx: SqliteReplayContext, enqueue: (op: Op) => void, maxOutcomeBytes: number) {
  const { namespace, now, assertOpen } = ctx;
  /** Runs `work` on the prepared statements (the database opened and the schema ensured first), failing closed. */
  const direct = async <T>(work: (prepared: Statements) => T): Promise<T> => {
    try {
      const prepared = ctx.current() ?? (await ctx.prepared());
      assertOpen();
      return work(prepared);
    } catch (error) {
      throw toStoreError(error);
    }
  };
  return {
    async consume(id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean> {
      const expires = checkConsumeArgs(id, expiresAtMs);
      const { minted } = checkSpendOptions('consume', options);
      assertOpen();
      return new Promise<boolean>((resolve, reject) => enqueue({ kind: 'consume', id, expires, minted, queuedAt: 0, resolve, reject }));
    },
    async claim(id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult> {
      const expires = checkClaimArgs(id, expiresAtMs, fingerprint);
      const args = checkClaimOptions(options);
      assertOpen();
      return new Promise<ClaimResult>((resolve, reject) =>
        enqueue({ kind: 'claim', id, expires, fp: fingerprint, ...args, queuedAt: 0, resolve, reject }),
      );
    },
    async record(id: string, fingerprint: string, outcome: string, options?: { owner?: string | undefined }): Promise<boolean> {
      const stored = checkRecordArgs(id, fingerprint, outcome, maxOutcomeBytes);
      const owner = checkRecordOwner(options);
      assertOpen();
      return new Promise<boolean>((resolve, reject) =>
        enqueue({ kind: 'record', id, fp: fingerprint, outcome: stored, owner, queuedAt: 0, resolve, reject }),
      );
    },
    async renew(id: string, owner: string, leaseMs: number): Promise<boolean> {
      checkLeaseArgs('renew', id, owner);
      const lease = checkLeaseMs('renew', leaseMs);
      assertOpen();
      return direct((s) => s.renew.run({ ns: namespace, id, owner, lease, now: Math.floor(now()) }).changes > 0);
    },
    /** Compare-and-delete, then: does a live row still hold the id (another owner's claim, or an outcome)? */
    async release(id: string, owner: string): Promise<boolean> {
      checkLeaseArgs('release', id, owner);
      assertOpen();
      return direct((s) =>
        inWriteTransaction(
          s.db,
          () => s.begin.run(),
          () => s.release.run(namespace, id, owner).changes > 0 || s.live.get(namespace, id, Math.floor(now())) === undefined,
        ),
      );
    },
    async time(): Promise<number> {
      assertOpen();
      return Math.floor(now());
    },
    /** The namespace's ledger epoch: written with the store's clock when missing (one write transaction), then read. */
    async ledgerEpoch(): Promise<number> {
      assertOpen();
      return direct((s) =>
        inWriteTransaction(
          s.db,
          () => s.begin.run(),
          () => {
            s.epochInsert.run(namespace, Math.floor(now()));
            const epoch = Number((s.epoch.get(namespace) as { epoch_ms?: unknown } | undefined)?.epoch_ms ?? Number.NaN);
            if (!Number.isSafeInteger(epoch)) throw new Error('the ledger epoch could not be read');
            return epoch;
          },
        ),
      );
    },
    /**
     * The fleet check's exchange: in one write transaction (`BEGIN IMMEDIATE`: other processes on the file wait), by
     * the store's clock, the namespace's expired rows deleted, its live rows read, the offer applied by the contract's
     * rules (`applyKeyFingerprintOffer`) and the new or extended rows upserted.
     */
    async keyFingerprints(offer: readonly KeyFingerprint[]): Promise<KeyFingerprint[]> {
      const checked = parseKeyFingerprintOffer(offer);
      assertOpen();
      const applied = await direct((s) =>
        inWriteTransaction(
          s.db,
          () => s.begin.run(),
          () => {
            const t = Math.floor(now());
            s.keysExpired.run(namespace, t);
            const { records } = s.keysLive.get(namespace, t) as { records: string };
            const rows = JSON.parse(records) as [string, string, number][];
            const held = rows.map(([kid, fingerprint, expiresAtMs]) => ({ kid, fingerprint, expiresAtMs }));
            const result = applyKeyFingerprintOffer(held, checked, t);
            for (const w of result?.writes ?? []) s.keysUpsert.run(namespace, w.kid, w.fingerprint, w.expiresAtMs);
            return result;
          },
        ),
      );
      if (applied === undefined) throw fleetKeysFull();
      return applied.records;
    },
  };
}
