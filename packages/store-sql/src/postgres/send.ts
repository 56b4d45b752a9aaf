import { StoreUnavailableError } from '@mrtr/core/errors';
import { withDeadline } from '@mrtr/core/store';
import type { PgPoolClientLike, PgPoolLike, PgQueryConfigLike, PgQueryResultLike } from '../shared/drivers.js';
import { holdErrors, localTimeoutsSql, type PoolHandle, type PostgresSettings } from './connection.js';

/** A statement that failed before it was sent: nothing can have been written, nothing to ask. */
export class Unsent {
  readonly error: unknown;
  constructor(error: unknown) {
    this.error = error;
  }
}

/** The error an {@link Unsent} carries, or the error itself. */
export const sentError = (error: unknown): unknown => (error instanceof Unsent ? error.error : error);

/** What the sender needs of its store. */
export interface SenderStore {
  settings: PostgresSettings;
  pool: PoolHandle;
  /** The pool once it exists and the schema is ensured (`undefined` before: `ready` makes it so). */
  readyPool(): PgPoolLike | undefined;
  ready(): Promise<PgPoolLike>;
  assertOpen(): void;
  deadlineError(): Error;
}

export interface Sender {
  /**
   * Sends one statement (a single upsert or a batch) on a connection of its own, so a slow statement holds up only
   * its own calls. Until it is sent (set-up, connection, the settings check) it is bounded by `budgetMs` and a
   * failure is an {@link Unsent}; once sent, the server bounds it (statement_timeout, lock_timeout) and the client
   * waits for the reply at most `replyWaitMs`. `whole`: a whole transaction in one simple query. A connection that
   * failed is destroyed, not returned to the pool.
   */
  send(config: PgQueryConfigLike, budgetMs: number, whole?: boolean): Promise<PgQueryResultLike>;
  /**
   * One query on a connection of its own (the owner lookups). A connection of an injected pool is checked on first
   * use, as for a consume, so that a consume sent on it later is the next thing it sends.
   */
  queryOnConnection(config: PgQueryConfigLike): Promise<PgQueryResultLike>;
}

/** Runs `work` on a checked-out connection, then returns it to the pool, or destroys it when `work` failed. */
async function releasing<T>(client: PgPoolClientLike, unhold: () => void, work: () => Promise<T>): Promise<T> {
  try {
    const result = await work();
    unhold();
    client.release();
    return result;
  } catch (error) {
    unhold();
    client.release(error instanceof Error ? error : true);
    throw error;
  }
}

const SETTINGS_SQL = "SELECT name, setting FROM pg_settings WHERE name IN ('statement_timeout', 'lock_timeout')";

export function createSender(deps: SenderStore): Sender {
  const { settings, pool: handle, assertOpen, deadlineError } = deps;
  const { statementTimeoutMs, replyWaitMs } = settings;
  /** Connections of an injected pool, checked once each: does the server bound their statements? */
  const checkedConnections = new WeakMap<object, boolean>();

  /**
   * Whether the server cancels this connection's statements and lock waits within statementTimeoutMs by
   * itself (`statement_timeout` and `lock_timeout` both set, neither above it). A pool the store created
   * sends both as startup parameters; an injected pool's connection is asked once.
   */
  const serverBounded = async (client: PgPoolClientLike): Promise<boolean> => {
    const known = checkedConnections.get(client);
    if (known !== undefined) return known;
    const result = await client.query({ text: SETTINGS_SQL, query_timeout: replyWaitMs });
    const found = new Map<unknown, number>();
    for (const row of result.rows) {
      const { name, setting } = row as { name?: unknown; setting?: unknown };
      found.set(name, Number(setting));
    }
    const within = (value: number | undefined) => value !== undefined && value > 0 && value <= statementTimeoutMs;
    const answer = within(found.get('statement_timeout')) && within(found.get('lock_timeout'));
    checkedConnections.set(client, answer);
    return answer;
  };

  /**
   * A statement on a connection without server-side bounds: in a transaction whose `SET LOCAL statement_timeout` /
   * `lock_timeout` make the server cancel it; one that the client gave up on cannot commit later either, as its
   * COMMIT is never sent.
   */
  const inTransaction = async (client: PgPoolClientLike, config: PgQueryConfigLike): Promise<PgQueryResultLike> => {
    try {
      await client.query({ text: `BEGIN; ${localTimeoutsSql(settings)}`, query_timeout: replyWaitMs });
    } catch (error) {
      throw new Unsent(error);
    }
    const result = await client.query({ ...config, query_timeout: replyWaitMs });
    await client.query({ text: 'COMMIT', query_timeout: replyWaitMs });
    return result;
  };

  const replyDeadlineError = () =>
    new StoreUnavailableError({ cause: new Error(`replay store deadline exceeded: no reply within ${replyWaitMs} ms`) });

  /** A checked-out connection and whether the server bounds it, within `budgetMs`; a failure is an {@link Unsent}. */
  const checkOut = async (budgetMs: number): Promise<{ client: PgPoolClientLike; unhold: () => void; serverSide: boolean }> => {
    const sendBy = performance.now() + budgetMs;
    const left = () => Math.max(1, sendBy - performance.now());
    try {
      const pool = deps.readyPool() ?? (await withDeadline(deps.ready(), left(), deadlineError));
      assertOpen();
      if (performance.now() >= sendBy) throw deadlineError();
      const connecting = pool.connect();
      let client: PgPoolClientLike;
      let unhold = () => {};
      try {
        client = await withDeadline(connecting, left(), deadlineError);
        unhold = holdErrors(client);
      } catch (error) {
        // A connection that arrives after the deadline goes back to the pool unused.
        connecting.then(
          (late) => late.release(),
          () => {},
        );
        throw error;
      }
      try {
        assertOpen();
        const serverSide = handle.owned !== undefined || (await withDeadline(serverBounded(client), left(), deadlineError));
        return { client, unhold, serverSide };
      } catch (error) {
        unhold();
        client.release(error instanceof Error ? error : true);
        throw error;
      }
    } catch (error) {
      throw new Unsent(error);
    }
  };

  const send = async (config: PgQueryConfigLike, budgetMs: number, whole = false): Promise<PgQueryResultLike> => {
    const { client, unhold, serverSide } = await checkOut(budgetMs);
    return releasing(client, unhold, () => {
      // A whole transaction in one simple query (the record batch: its own bounds, its lock, its statement).
      if (whole) return withDeadline(client.query({ ...config, query_timeout: replyWaitMs }), replyWaitMs, replyDeadlineError);
      // The pool the store created: pg's query_timeout (replyWaitMs) bounds the wait.
      if (handle.owned !== undefined) return client.query({ ...config, query_timeout: replyWaitMs });
      const work = serverSide ? client.query({ ...config, query_timeout: replyWaitMs }) : inTransaction(client, config);
      return withDeadline(work, replyWaitMs, replyDeadlineError);
    });
  };

  const queryOnConnection = async (config: PgQueryConfigLike): Promise<PgQueryResultLike> => {
    const pool = await handle.get();
    const client = await pool.connect();
    return releasing(client, holdErrors(client), async () => {
      if (handle.owned === undefined) await serverBounded(client);
      return client.query(config);
    });
  };

  return { send, queryOnConnection };
}
