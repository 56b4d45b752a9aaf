import { MrtrError } from '@mrtr/core';
import type { ClaimResult } from '@mrtr/core/store';
import { type ClaimWaiter, ownersOf, type RecordWaiter, rejectAll, type Waiter } from '../shared/batching.js';
import { budgetBucket, firstOf, type HeldRow, heldStatus, isLive, type SpendClock, spendRefusal } from '../shared/claims.js';
import type { SqliteStatementLike } from '../shared/drivers.js';
import { toStoreError } from '../shared/lifecycle.js';
import type { Statements } from './statements.js';

type ConsumeOp = Waiter & { readonly kind: 'consume' };
type ClaimOp = ClaimWaiter & { readonly kind: 'claim' };
type RecordOp = RecordWaiter & { readonly kind: 'record' };
/** A call waiting for its batch: consumes, claims and records share one queue and one transaction per batch. */
export type Op = ConsumeOp | ClaimOp | RecordOp;

/** What the calls of one SQLite replay store share. */
export interface SqliteReplayContext {
  readonly namespace: string;
  readonly now: () => number;
  readonly outcomeBudgetBytes: number;
  /** The prepared statements once they exist (no await on the hot path). */
  current(): Statements | undefined;
  /** The prepared statements (the database opened and the schema ensured first). */
  prepared(): Promise<Statements>;
  assertOpen(): void;
}

const isSqliteError = (error: unknown): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_');
};

/** A wrapped database that failed after a write may have written it: rethrown unless it is that case. */
function surely(prepared: Statements, error: unknown): void {
  if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw error;
}

/**
 * better-sqlite3 runs the statement inside the call: when `run` throws a SQLite error, the statement
 * did not write, and when it returns, its answer is in hand — no reply can be lost in between. Only a
 * wrapped database (an injected object that adds timeouts, proxies to another thread or process)
 * can fail after writing; for any error that is not SQLite's the store asks once, as the PostgreSQL
 * store does: this call's owner → `true`; a live row of another owner → `false`; else unknown.
 */
function resolveLost(ctx: SqliteReplayContext, statement: SqliteStatementLike, id: string, mine: string, original: unknown): boolean {
  let row: { owner?: unknown; expires_at?: unknown } | undefined;
  try {
    row = statement.get(ctx.namespace, id) as typeof row;
  } catch {
    throw toStoreError(original);
  }
  if (row !== undefined && row.owner === mine) return true;
  if (row !== undefined && Number(row.expires_at) >= Math.floor(ctx.now())) return false;
  throw toStoreError(original);
}

/** One consume inside the batch's transaction; a wrapped database failing after the write is asked there too. */
function consumeIn(ctx: SqliteReplayContext, prepared: Statements, op: ConsumeOp, t: number, mine: string): boolean {
  try {
    return prepared.consume.run(ctx.namespace, op.id, op.expires, mine, t).changes > 0;
  } catch (error) {
    surely(prepared, error);
    return resolveLost(ctx, prepared.owner, op.id, mine, error);
  }
}

/**
 * One claim, inside the batch's transaction: the upsert (see claimSql) hands back the row as it left it. Its
 * owner is this call's exactly when it took the id. A wrapped database failing after the write is asked once,
 * as for a consume.
 */
function claimIn(ctx: SqliteReplayContext, prepared: Statements, op: ClaimOp, t: number, mine: string): ClaimResult {
  let row: HeldRow | undefined;
  const lease = op.owner === undefined || op.leaseMs === undefined ? null : t + op.leaseMs;
  const params = { ns: ctx.namespace, id: op.id, expires: op.expires, owner: mine, fp: op.fp, now: t, lease, reclaim: op.reclaim ? 1 : 0 };
  try {
    row = prepared.claim.get(params) as HeldRow | undefined;
  } catch (error) {
    surely(prepared, error);
    try {
      row = prepared.row.get(ctx.namespace, op.id) as HeldRow | undefined;
    } catch {
      throw toStoreError(error);
    }
    if (row !== undefined && row.owner === mine) return firstOf(row);
    if (isLive(row, t)) return heldStatus(row, op.fp, t);
    throw toStoreError(error);
  }
  if (row === undefined) throw toStoreError(new Error('claim: the upsert returned no row'));
  return row.owner === mine ? firstOf(row) : heldStatus(row, op.fp, t);
}

/**
 * One record, inside the batch's transaction (the single writer: nothing else writes in between): the claim's own
 * fingerprint, no outcome yet, live; the outcome is kept when it is not '' and fits in what the namespace's
 * budget has left (its bytes go to the bucket of the id's expiry), else '' is stored.
 */
function recordIn(ctx: SqliteReplayContext, prepared: Statements, op: RecordOp, t: number, budget: { left: number | undefined }): boolean {
  const { namespace } = ctx;
  const row = prepared.row.get(namespace, op.id) as HeldRow | undefined;
  if (row === undefined || row.fp !== op.fp) return false;
  if (op.owner !== undefined && row.owner !== op.owner) return false;
  // A claim made with an owner and a lease is recorded by that owner only.
  if (op.owner === undefined && row.lease_until !== null && row.lease_until !== undefined) return false;
  // Recorded already: by this owner, it answers what the first record did (idempotent by owner).
  if (row.outcome !== null && row.outcome !== undefined) return op.owner !== undefined && row.outcome !== '';
  const expires = Number(row.expires_at);
  if (!(expires >= t)) return false;
  budget.left ??=
    ctx.outcomeBudgetBytes - Number((prepared.held.get(namespace, budgetBucket(t)) as { held?: unknown } | undefined)?.held ?? 0);
  const bytes = op.outcome === '' ? 0 : Buffer.byteLength(op.outcome, 'utf8');
  const keep = bytes > 0 && bytes <= budget.left;
  try {
    prepared.record.run(keep ? op.outcome : '', namespace, op.id, op.fp, t);
    if (keep) prepared.bump.run(namespace, budgetBucket(expires), bytes);
  } catch (error) {
    surely(prepared, error);
    // A wrapped database failing after the write: this outcome on the row → stored; else unknown.
    let after: HeldRow | undefined;
    try {
      after = prepared.row.get(namespace, op.id) as HeldRow | undefined;
    } catch {
      throw toStoreError(error);
    }
    if (after !== undefined && after.fp === op.fp && after.outcome === (keep ? op.outcome : '')) return keep;
    throw toStoreError(error);
  }
  if (keep) budget.left -= bytes;
  return keep;
}

type Answer = boolean | ClaimResult | MrtrError;

/**
 * The store's time for a batch and the namespace's ledger epoch, written first when missing (a new, emptied or
 * restored database starts a new one), in the batch's transaction.
 */
function epochClock(ctx: SqliteReplayContext, prepared: Statements, t: number): SpendClock {
  prepared.epochInsert.run(ctx.namespace, t);
  const row = prepared.epoch.get(ctx.namespace) as { epoch_ms?: unknown } | undefined;
  const epoch = Number(row?.epoch_ms ?? Number.NaN);
  if (!Number.isSafeInteger(epoch)) throw new Error('the ledger epoch could not be read');
  return { now: t, epoch };
}

/**
 * The batch's statements, in queue order, inside its transaction. A call's own store error (a wrapped database that
 * failed after a write, with no answer to be had) becomes its answer; any other error ends the batch.
 */
function runOps(ctx: SqliteReplayContext, prepared: Statements, batch: Op[]): Answer[] {
  const answers = new Array<Answer>(batch.length);
  // One random draw for the batch's owner values (a draw per call costs as much as the statement at high rates).
  const owners = ownersOf(batch as readonly { owner?: string | undefined }[]);
  const t = Math.floor(ctx.now());
  const clock = batch.some((op) => op.kind !== 'record') ? epochClock(ctx, prepared, t) : { now: t, epoch: t };
  const budget: { left: number | undefined } = { left: undefined };
  // Ids an earlier consume or claim of this batch left live: a later consume of one is false without a statement.
  const held = new Set<string>();
  for (let i = 0; i < batch.length; i++) {
    const op = batch[i] as Op;
    try {
      const refused = op.kind === 'record' ? undefined : spendRefusal(op.expires, op.minted, clock);
      if (refused !== undefined) {
        answers[i] = refused;
        continue;
      }
      if (op.kind === 'consume' && held.has(op.id)) {
        answers[i] = false;
        continue;
      }
      if (op.kind !== 'record') held.add(op.id);
      if (op.kind === 'claim') answers[i] = claimIn(ctx, prepared, op, t, owners[i] as string);
      else if (op.kind === 'record') answers[i] = recordIn(ctx, prepared, op, t, budget);
      else answers[i] = consumeIn(ctx, prepared, op, t, owners[i] as string);
    } catch (error) {
      if (!MrtrError.is(error) || !prepared.db.open) throw error;
      answers[i] = error;
    }
  }
  return answers;
}

/** The batch in one `BEGIN IMMEDIATE … COMMIT`, rolled back on any failure. */
function inTransaction(ctx: SqliteReplayContext, prepared: Statements, batch: Op[]): Answer[] {
  prepared.begin.run();
  try {
    const answers = runOps(ctx, prepared, batch);
    prepared.commit.run();
    return answers;
  } catch (error) {
    try {
      prepared.rollback.run();
    } catch {
      // SQLite rolled back already (or the database is gone)
    }
    throw error;
  }
}

/**
 * Runs one batch of queued consumes, claims and records, in queue order, in one `BEGIN IMMEDIATE … COMMIT`
 * (one commit, one sync, for the whole batch, with the ledger epoch's check), and settles each once
 * the commit has succeeded. Statements run one after the other, so a later call of an id sees what an earlier
 * one wrote (a repeated consume is `false`, a repeated claim `pending` or a miss). A SQLite error (a busy lock past
 * busy_timeout, a full disk, a failed commit) rolls the batch back and fails every call closed.
 */
export async function runBatch(ctx: SqliteReplayContext, batch: Op[]): Promise<void> {
  let prepared: Statements;
  try {
    prepared = ctx.current() ?? (await ctx.prepared());
    ctx.assertOpen();
  } catch (error) {
    return rejectAll(batch, toStoreError(error));
  }
  let answers: Answer[];
  try {
    answers = inTransaction(ctx, prepared, batch);
  } catch (error) {
    return rejectAll(batch, toStoreError(error));
  }
  batch.forEach((op, i) => {
    const answer = answers[i] as Answer;
    if (answer instanceof MrtrError) op.reject(answer);
    else (op.resolve as (value: boolean | ClaimResult) => void)(answer);
  });
}
