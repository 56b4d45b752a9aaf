/**
 * A `TaskStore` (`@mrtr/core`) on DynamoDB. Items (`H(x)`: SHA-256 in base64url):
 * - `t#<ns>#<H(taskId)>`: the task: `rec` (JSON), `v` (a random version written with every change), `exp`, `ttl`;
 * - `p#<ns>#<H(principal)>`: the principal's tasks, `e` (JSON: `H(taskId)` → [expiry, 1 when final]), `v` (version),
 *   and, while it holds a final task, `hv` = `<ns>` and `hk` = how many tasks it keeps (the sparse `heavy` index);
 * - `n#<ns>#count`: how many tasks the store keeps, a bucket counter (see `bucketCounter`).
 *
 * Every write is conditional (optimistic on `v`, or `attribute_not_exists`), and the steps are ordered so that a
 * process dying between them can only leave a count too high (refusing a little early, until the entry's expiry or
 * its bucket's end), never too low: a create takes a slot of the store-wide count, then adds the entry to its
 * principal's item (checking both per-principal bounds), then puts the task; an update raises the entry's expiry
 * before writing the task and marks it final after.
 */
import { type AttributeValue, DeleteItemCommand, PutItemCommand, QueryCommand } from '@aws-sdk/client-dynamodb';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { StoreUnavailableError, TaskLimitError } from '@mrtr/core/errors';
import {
  assertTaskCreateArguments,
  assertTaskUpdateArguments,
  asTaskRecord,
  isTerminalStatus,
  parseTaskStoreLimits,
  parseTaskUpdateOptions,
  roomFromAtLeast,
  runTaskUpdate,
  TASK_STORE_LIMIT_OPTIONS,
  TASK_UPDATE_OPTIONS,
  taskExpiresAt,
  type TaskRecord,
  type TaskStore,
  type TaskStoreLimits,
  type TaskUpdateOptions,
} from '@mrtr/core/tasks';
import type { BucketCounter, Table } from './table.js';
import { bucketCounter, type DynamoConnectionOptions, hash, openTable, readItem, str, ttlOf } from './table.js';
import { CONNECTION_OPTIONS } from './table.js';

const LABEL = 'createDynamoTaskStore';
/** The store-wide count's buckets: a task counts until the end of the 5-minute bucket of its expiry. */
const COUNT_BUCKET_MS = 300_000;

/** Options of {@link createDynamoTaskStore}: the table, the bounds (16 unfinished and 256 kept per principal, 100,000 in all) and these. */
export interface DynamoTaskStoreOptions extends DynamoConnectionOptions, TaskStoreLimits, TaskUpdateOptions {
  /**
   * Most read-and-write rounds one operation tries when other instances change the same item at the same moment
   * (1–1000); then it rejects `ERR_STORE_UNAVAILABLE`.
   * @default 32
   */
  maxUpdateAttempts?: number | undefined;
}

/** A {@link TaskStore} on DynamoDB. */
export interface DynamoTaskStore extends TaskStore {
  readonly tableName: string;
  close(): Promise<void>;
}

type Entries = Record<string, [number, 0 | 1]>;

const newVersion = (): string => base64urlEncode(randomBytes(16));
const pause = (attempt: number): Promise<void> | undefined =>
  attempt >= 2 ? new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(20, attempt * 2))) : undefined;

/** A principal's item: its task entries, changed optimistically on its version, and the `heavy` index. */
interface PrincipalBook {
  /** Changes a principal's entries with `change` (re-run on conflicts); `change` answers false to leave them. */
  changePrincipal(holder: string, change: (entries: Entries) => boolean): Promise<boolean>;
  /**
   * Drops the oldest final task of the principal that keeps the most tasks among those holding one, when it keeps
   * at least `roomFromAtLeast` of what `newcomer` keeps, else one of `newcomer`'s own (see `makeRoom` below). True
   * when a task went.
   */
  makeRoom(newcomer: string): Promise<boolean>;
}

function principalBook(table: Table, count: BucketCounter, maxAttempts: number): PrincipalBook {
  const { tableName, now } = table;
  const taskKey = (member: string) => table.key('t', member);
  const principalKey = (holder: string) => table.key('p', holder);
  const heavyPartition = table.key('', '').pk!.S!; // `#<ns>#`: the namespace, as the index's partition

  /** A principal's entries, pruned of expired ones by this store's clock, and the version to write against. */
  const readPrincipal = async (holder: string): Promise<{ entries: Entries; version: string | undefined }> => {
    const item = await readItem(table, principalKey(holder));
    if (item === undefined) return { entries: {}, version: undefined };
    let entries: Entries;
    try {
      entries = JSON.parse(str(item.e) ?? '') as Entries;
    } catch {
      throw unavailable('a principal item is not one this store wrote');
    }
    const at = now();
    for (const [member, [exp]] of Object.entries(entries)) if (exp <= at) delete entries[member];
    return { entries, version: str(item.v) };
  };

  /** Writes a principal's entries if nobody changed them since `version`: false on a conflict. */
  const writePrincipal = async (holder: string, entries: Entries, version: string | undefined): Promise<boolean> => {
    const members = Object.values(entries);
    const finals = members.filter(([, final]) => final === 1).length;
    const item: Record<string, AttributeValue> = { ...principalKey(holder), e: { S: JSON.stringify(entries) }, v: { S: newVersion() } };
    const latest = members.reduce((max, [exp]) => Math.max(max, exp), 0);
    if (latest > 0) item.ttl = { N: ttlOf(latest) };
    if (finals > 0) {
      item.hv = { S: heavyPartition };
      item.hk = { N: String(members.length) };
    }
    const reply = await table.send(
      new PutItemCommand({
        TableName: tableName,
        Item: item,
        ConditionExpression: version === undefined ? 'attribute_not_exists(pk)' : '#v = :v',
        ExpressionAttributeNames: version === undefined ? undefined : { '#v': 'v' },
        ExpressionAttributeValues: version === undefined ? undefined : { ':v': { S: version } },
      }),
    );
    return reply !== 'condition';
  };

  /** Changes a principal's entries with `change` (re-run on conflicts); `change` answers false to leave them. */
  const changePrincipal = async (holder: string, change: (entries: Entries) => boolean): Promise<boolean> => {
    for (let attempt = 0; attempt < maxAttempts; attempt++) {
      const { entries, version } = await readPrincipal(holder);
      if (!change(entries)) return false;
      if (await writePrincipal(holder, entries, version)) return true;
      await pause(attempt);
    }
    throw unavailable(`a principal's tasks kept changing during ${maxAttempts} attempts`);
  };

  /**
   * Drops the oldest final task of the principal that keeps the most tasks among those holding one and at least
   * `roomFromAtLeast` of what `newcomer` keeps, found on the `heavy` index (eventually consistent: a candidate is read
   * again before anything is dropped), else the newcomer's own oldest final task. True when a task went.
   */
  const makeRoom = async (newcomer: string): Promise<boolean> => {
    const least = roomFromAtLeast(Object.keys((await readPrincipal(newcomer)).entries).length);
    const reply = await table.send<{ Items?: Record<string, AttributeValue>[] }>(
      new QueryCommand({
        TableName: tableName,
        IndexName: 'heavy',
        KeyConditionExpression: '#hv = :hv',
        ExpressionAttributeNames: { '#hv': 'hv' },
        ExpressionAttributeValues: { ':hv': { S: heavyPartition } },
        ScanIndexForward: false,
        Limit: 8,
      }),
    );
    if (reply === 'condition') return false;
    const heavier = (reply.Items ?? []).map((candidate) => {
      const pk = str(candidate.pk);
      return pk?.slice(pk.lastIndexOf('#') + 1);
    });
    for (const holder of [...heavier.filter((h) => h !== undefined && h !== newcomer), newcomer] as string[]) {
      let victim: [string, number] | undefined;
      const dropped = await changePrincipal(holder, (entries) => {
        victim = undefined;
        if (holder !== newcomer && Object.keys(entries).length < least) return false;
        for (const [member, [exp, final]] of Object.entries(entries)) {
          if (final === 1 && (victim === undefined || exp < victim[1])) victim = [member, exp];
        }
        if (victim === undefined) return false;
        delete entries[victim[0]];
        return true;
      });
      if (!dropped || victim === undefined) continue;
      const [member, exp] = victim;
      await table.send(new DeleteItemCommand({ TableName: tableName, Key: taskKey(member) }));
      await count.give(1, exp);
      return true;
    }
    return false;
  };

  return { changePrincipal, makeRoom };
}

/** A task's record and version; `undefined` when absent or expired (by this store's clock). A corrupt item fails closed. */
async function readTask(table: Table, taskId: string): Promise<{ version: string; record: TaskRecord } | undefined> {
  const item = await readItem(table, table.key('t', hash(taskId)));
  if (item === undefined) return undefined;
  const corrupt = () => unavailable(`the item of a task is not a task record (id of ${taskId.length} characters)`);
  const version = str(item.v);
  if (version === undefined) throw corrupt();
  let parsed: unknown;
  try {
    parsed = JSON.parse(str(item.rec) ?? '');
  } catch {
    throw corrupt();
  }
  const record = asTaskRecord(parsed);
  if (record === undefined || record.taskId !== taskId) throw corrupt();
  if (table.now() >= taskExpiresAt(record)) return undefined;
  return { version, record };
}

/** What `create` needs: the table, the store-wide count, the principals' items and the bounds. */
interface Tasks {
  readonly table: Table;
  readonly count: BucketCounter;
  readonly book: PrincipalBook;
  readonly maxLive: number;
  readonly maxKept: number;
  readonly maxTasks: number;
}

const unavailable = (message: string): StoreUnavailableError => new StoreUnavailableError({ cause: new Error(`${LABEL}: ${message}`) });

/**
 * `create` in the order of the module comment: a slot of the store (from the count, else made from the heaviest
 * holder's final tasks), the principal's bounds and entry, then the task itself if its id is free.
 */
async function createTask(tasks: Tasks, record: TaskRecord): Promise<void> {
  const { table, count, book, maxLive, maxKept, maxTasks } = tasks;
  const { tableName, now } = table;
  const { changePrincipal, makeRoom } = book;
  const taskKey = (member: string) => table.key('t', member);
  const exp = assertTaskCreateArguments(LABEL, record);
  const { taskId } = record;
  if (table.closed) throw unavailable('store is closed');
  const member = hash(taskId);
  const holder = hash(record.principal);
  const final = isTerminalStatus(record.status) ? 1 : 0;

  // 1. A slot of the store: from the count, else from the heaviest holder's final tasks.
  let slot = await count.take(1, exp, maxTasks);
  for (let i = 0; !slot && i < 3; i++) {
    if (!(await makeRoom(holder))) break;
    slot = await count.take(1, exp, maxTasks);
  }
  if (!slot) throw new TaskLimitError('store', maxTasks);
  // 2. The principal's bounds, and its entry.
  let refused: TaskLimitError | Error | undefined;
  try {
    await changePrincipal(holder, (entries) => {
      refused = undefined;
      const held = Object.values(entries);
      if (entries[member] !== undefined) refused = new Error(`${LABEL}: create: a task with this id is already present`);
      else if (final === 0 && held.filter(([, f]) => f === 0).length >= maxLive) refused = new TaskLimitError('live', maxLive);
      else if (held.length >= maxKept) refused = new TaskLimitError('kept', maxKept);
      if (refused !== undefined) return false;
      entries[member] = [exp, final];
      return true;
    });
  } catch (error) {
    await table.release('a task slot', () => count.give(1, exp));
    throw error;
  }
  if (refused !== undefined) {
    await table.release('a task slot', () => count.give(1, exp));
    throw refused;
  }
  // 3. The task itself, if its id is free.
  const version = newVersion();
  const put = await table.send(
    new PutItemCommand({
      TableName: tableName,
      Item: {
        ...taskKey(member),
        rec: { S: JSON.stringify(record) },
        v: { S: version },
        exp: { N: String(exp) },
        ttl: { N: ttlOf(exp) },
      },
      ConditionExpression: 'attribute_not_exists(pk) OR #exp <= :now',
      ExpressionAttributeNames: { '#exp': 'exp' },
      ExpressionAttributeValues: { ':now': { N: String(now()) } },
    }),
  );
  if (put !== 'condition') return;
  // Held: by this very call (the SDK retried a put whose reply was lost), or by another task with this id.
  const stored = await readItem(table, taskKey(member));
  if (stored !== undefined && str(stored.v) === version) return;
  await table.release("a principal's entry", () => changePrincipal(holder, (entries) => delete entries[member]));
  await table.release('a task slot', () => count.give(1, exp));
  throw new Error(`${LABEL}: create: a task with this id is already present`);
}

export function createDynamoTaskStore(options: DynamoTaskStoreOptions): DynamoTaskStore {
  if (options === undefined) throw new TypeError(`${LABEL}: options must be an object with client and tableName`);
  const table = openTable(LABEL, options, { ...CONNECTION_OPTIONS, ...TASK_STORE_LIMIT_OPTIONS, ...TASK_UPDATE_OPTIONS });
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept, maxTasks } = parseTaskStoreLimits(LABEL, options);
  const { maxUpdateAttempts: maxAttempts } = parseTaskUpdateOptions(LABEL, options);
  const { tableName } = table;
  const count = bucketCounter(table, table.key('n', 'count'), COUNT_BUCKET_MS);
  const taskKey = (member: string) => table.key('t', member);
  const book = principalBook(table, count, maxAttempts);
  const { changePrincipal } = book;
  const read = (taskId: string) => readTask(table, taskId);
  const create = (record: TaskRecord): Promise<void> => createTask({ table, count, book, maxLive, maxKept, maxTasks }, record);

  const get = async (taskId: string): Promise<TaskRecord | undefined> => {
    if (typeof taskId !== 'string') throw new TypeError(`${LABEL}: get: taskId must be a string`);
    if (table.closed) throw unavailable('store is closed');
    return (await read(taskId))?.record;
  };

  const update = async (taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined> => {
    assertTaskUpdateArguments(LABEL, taskId, change);
    if (table.closed) throw unavailable('store is closed');
    const member = hash(taskId);
    return runTaskUpdate(LABEL, taskId, change, maxAttempts, {
      read: () => read(taskId),
      write: async (current, next) => {
        const exp = taskExpiresAt(next);
        if (!Number.isSafeInteger(exp)) throw new TypeError(`${LABEL}: update: lastUpdatedAt + ttlMs must be a safe integer`);
        const before = current.record;
        const holder = hash(before.principal);
        const oldExp = taskExpiresAt(before);
        const json = JSON.stringify(next);
        // Counts first: the entry's expiry and the store-wide count never fall behind the task's.
        if (exp > oldExp) {
          await changePrincipal(holder, (entries) => {
            const entry = entries[member];
            if (entry === undefined || entry[0] >= exp) return false;
            entry[0] = exp;
            return true;
          });
          if (Math.floor(exp / COUNT_BUCKET_MS) !== Math.floor(oldExp / COUNT_BUCKET_MS)) await count.take(1, exp, Number.MAX_SAFE_INTEGER);
        }
        const version = newVersion();
        const written = await table.send(
          new PutItemCommand({
            TableName: tableName,
            Item: { ...taskKey(member), rec: { S: json }, v: { S: version }, exp: { N: String(exp) }, ttl: { N: ttlOf(exp) } },
            ConditionExpression: '#v = :v',
            ExpressionAttributeNames: { '#v': 'v' },
            ExpressionAttributeValues: { ':v': { S: current.version } },
          }),
        );
        const moved = exp > oldExp && Math.floor(exp / COUNT_BUCKET_MS) !== Math.floor(oldExp / COUNT_BUCKET_MS);
        let ours = written !== 'condition';
        if (!ours) ours = str((await readItem(table, taskKey(member)))?.v) === version; // the SDK retried our own put
        if (!ours) {
          if (moved) await table.release('a task slot', () => count.give(1, exp));
          return 'conflict';
        }
        if (moved) await table.release('a task slot', () => count.give(1, oldExp));
        if (!isTerminalStatus(before.status) && isTerminalStatus(next.status)) {
          await changePrincipal(holder, (entries) => {
            const entry = entries[member];
            if (entry === undefined || entry[1] === 1) return false;
            entry[1] = 1;
            return true;
          });
        }
        return JSON.parse(json) as TaskRecord;
      },
      exhausted: (attempts) => unavailable(`update: the task kept changing during ${attempts} attempts`),
    });
  };

  return {
    create,
    get,
    update,
    tableName,
    close: async () => {
      table.closed = true;
    },
  };
}
