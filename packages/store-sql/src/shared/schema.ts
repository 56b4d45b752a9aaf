/**
 * The tables the stores keep, declared once: the DDL that `ensureSchema()` runs and the checks that
 * `checkPostgresSchema` / `checkSqliteSchema` (and their task-table counterparts) make are both built from here.
 */

export type Dialect = 'postgres' | 'sqlite';

/** One column: its type per dialect; `required` columns are `NOT NULL`. */
export interface Column {
  readonly name: string;
  readonly postgres: string;
  readonly sqlite: string;
  readonly required: boolean;
}

/** A table: its columns (in order) and its primary key. */
export interface TableDeclaration {
  readonly columns: readonly Column[];
  readonly primaryKey: readonly string[];
}

const col = (name: string, postgres: string, sqlite: string, required: boolean): Column => ({ name, postgres, sqlite, required });

/**
 * The replay table. `owner` (lost replies, and a claim's owner), `fp` and `outcome` (outcome recording), `misses`
 * (claims with another fingerprint), `lease_until` (a claim's lease expiry, by the store's clock; NULL: no lease) and
 * `fence` (reclaims of a lapsed lease) came after the first version: nullable without a default (adding them is a
 * catalog-only change), and added by `ensureSchema()` to a table that lacks them.
 */
export const REPLAY_TABLE: TableDeclaration = {
  columns: [
    col('ns', 'text', 'TEXT', true),
    col('id', 'text', 'TEXT', true),
    col('expires_at', 'bigint', 'INTEGER', true),
    col('owner', 'text', 'TEXT', false),
    col('fp', 'text', 'TEXT', false),
    col('outcome', 'text', 'TEXT', false),
    col('misses', 'integer', 'INTEGER', false),
    col('lease_until', 'bigint', 'INTEGER', false),
    col('fence', 'integer', 'INTEGER', false),
  ],
  primaryKey: ['ns', 'id'],
};

/** The replay table's columns added after the first version, in the order they came. */
export const ADDED_COLUMNS = ['owner', 'fp', 'outcome', 'misses', 'lease_until', 'fence'] as const;
export type AddedColumn = (typeof ADDED_COLUMNS)[number];

/**
 * The added columns the schema check reports on: a consume needs `owner`, outcome recording `fp` and `outcome`, a
 * claim `lease_until` and `fence`. (`misses` only counts claims of another fingerprint; `ensureSchema()` adds it with
 * the others.)
 */
const CHECKED_ADDED_COLUMNS = ['owner', 'fp', 'outcome', 'lease_until', 'fence'] as const;

/** The outcome budget: bytes of kept outcomes per namespace and expiry bucket (table `<table>_budget`). */
export const BUDGET_TABLE: TableDeclaration = {
  columns: [col('ns', 'text', 'TEXT', true), col('bucket', 'bigint', 'INTEGER', true), col('bytes', 'bigint', 'INTEGER', true)],
  primaryKey: ['ns', 'bucket'],
};

/**
 * The ledger epoch: one row per namespace, when its ledger began by the store's clock (table `<table>_epoch`), written
 * by the first consume or claim that finds it missing (a new table, a truncated or restored one).
 */
export const EPOCH_SUFFIX = '_epoch';
export const EPOCH_TABLE: TableDeclaration = {
  columns: [col('ns', 'text', 'TEXT', true), col('epoch_ms', 'bigint', 'INTEGER', true)],
  primaryKey: ['ns'],
};

/**
 * The fleet check's key fingerprints (`keyFingerprints`): one row per namespace and kid, its keyed fingerprint and until
 * when it is kept by the store's clock (table `<table>_keys`). Never a key.
 */
export const KEYS_SUFFIX = '_keys';
export const KEYS_TABLE: TableDeclaration = {
  columns: [
    col('ns', 'text', 'TEXT', true),
    col('kid', 'text', 'TEXT', true),
    col('fp', 'text', 'TEXT', true),
    col('expires_at', 'bigint', 'INTEGER', true),
  ],
  primaryKey: ['ns', 'kid'],
};

/** The task table: one row per task, its key columns and the record as JSON text. */
export const TASK_TABLE: TableDeclaration = {
  columns: [
    col('ns', 'text', 'TEXT', true),
    col('task_id', 'text', 'TEXT', true),
    col('principal', 'text', 'TEXT', true),
    col('live', 'boolean', 'INTEGER', true),
    col('version', 'bigint', 'INTEGER', true),
    col('expires_at', 'bigint', 'INTEGER', true),
    col('record', 'text', 'TEXT', true),
  ],
  primaryKey: ['ns', 'task_id'],
};

/** Tasks held per namespace (table `<table>_counts`), kept in step by every create. */
export const COUNTS_TABLE: TableDeclaration = {
  columns: [col('ns', 'text', 'TEXT', true), col('tasks', 'bigint', 'INTEGER', true)],
  primaryKey: ['ns'],
};

/** The indexes besides the primary keys: `<table>_expires_at_idx` on both tables, `<table>_principal_idx` on tasks. */
export const EXPIRY_INDEX = { suffix: '_expires_at_idx', columns: ['expires_at'] } as const;
export const PRINCIPAL_INDEX = { suffix: '_principal_idx', columns: ['ns', 'principal', 'expires_at'] } as const;

const columnSql = (dialect: Dialect, column: Column): string => `${column.name} ${column[dialect]}${column.required ? ' NOT NULL' : ''}`;

/** `CREATE TABLE IF NOT EXISTS` of a declared table; `table` is quoted (and possibly schema-qualified) already. */
export function createTableSql(dialect: Dialect, table: string, declaration: TableDeclaration): string {
  const columns = declaration.columns.map((column) => columnSql(dialect, column)).join(', ');
  return `CREATE TABLE IF NOT EXISTS ${table} (${columns}, PRIMARY KEY (${declaration.primaryKey.join(', ')}))`;
}

/** `CREATE INDEX IF NOT EXISTS`; `name` is quoted already. */
export const createIndexSql = (name: string, table: string, columns: readonly string[]): string =>
  `CREATE INDEX IF NOT EXISTS ${name} ON ${table} (${columns.join(', ')})`;

/** The type of an added column of the replay table. */
export const addedColumnType = (dialect: Dialect, name: AddedColumn): string =>
  (REPLAY_TABLE.columns.find((column) => column.name === name) as Column)[dialect];

/** A table as the catalog describes it: its columns, its primary key and its indexes (each a column list `a,b`). */
export interface TableShape {
  /** `type` as the catalog spells it (PostgreSQL's `data_type`, SQLite's declared type). */
  columns: { name: string; type: string; nullable: boolean }[];
  primaryKey: string | undefined;
  indexes: string[];
}

/**
 * What a schema check found, for a table that exists: `problems` make the store fail (a missing or mistyped column,
 * no primary key), `warnings` make it slower or need a migration; `summary` describes the table when all is well.
 */
export interface SqlSchemaCheck {
  problems: string[];
  warnings: string[];
  summary: string;
}

const typeIn = (dialect: Dialect, type: string): string => (dialect === 'sqlite' ? type.toUpperCase() : type);

/** Required columns: present, of their type, `NOT NULL`. */
function requiredColumns(dialect: Dialect, shape: TableShape, columns: readonly Column[], raw: boolean): string[] {
  const problems: string[] = [];
  for (const column of columns) {
    const want = column[dialect];
    const found = shape.columns.find((c) => c.name === column.name);
    if (found === undefined) problems.push(`column ${column.name} is missing`);
    else if (typeIn(dialect, found.type) !== want) {
      problems.push(`column ${column.name} is ${(raw ? found.type : typeIn(dialect, found.type)) || 'untyped'}, not ${want}`);
    } else if (found.nullable) problems.push(`column ${column.name} allows NULL`);
  }
  return problems;
}

const firstColumnIs = (indexes: readonly string[], column: string): boolean => indexes.some((cols) => cols.split(',')[0] === column);

/**
 * The replay table's shape against {@link REPLAY_TABLE}: the key columns and the primary key (else single use is not
 * enforced), the expiry index (else purges scan the table), the added columns (of another type fails; missing warns
 * with the migration: the store adds them before its first consume with ensureSchema, the default; with
 * ensureSchema: false every consume fails until they exist).
 */
export function checkReplayShape(dialect: Dialect, table: string, shape: TableShape): SqlSchemaCheck {
  const required = REPLAY_TABLE.columns.filter((column) => column.required);
  const problems = requiredColumns(dialect, shape, required, true);
  if (shape.primaryKey !== REPLAY_TABLE.primaryKey.join(',')) problems.push('no PRIMARY KEY (ns, id): single use is not enforced');
  const warnings = firstColumnIs(shape.indexes, 'expires_at') ? [] : ['no index on expires_at (purges scan the table)'];
  const missing: string[] = [];
  for (const name of CHECKED_ADDED_COLUMNS) {
    const type = addedColumnType(dialect, name);
    const found = shape.columns.find((c) => c.name === name);
    if (found === undefined) missing.push(name);
    else if (typeIn(dialect, found.type) !== type)
      problems.push(`column ${name} is ${typeIn(dialect, found.type) || 'untyped'}, not ${type}`);
  }
  if (missing.length > 0) {
    const what = missing.length === 1 ? `no ${missing[0]} column` : `no ${missing.join(', ')} columns`;
    const alter = missing.map((name) => `ADD COLUMN ${name} ${addedColumnType(dialect, name as AddedColumn)}`).join(', ');
    warnings.push(
      `${what} (a table of an earlier version): the store adds ${missing.length === 1 ? 'it' : 'them'} before its first consume (ensureSchema, the default); with ensureSchema: false every consume fails until a migration runs ALTER TABLE "${table}" ${alter}`,
    );
  }
  const columns = [...required.map((column) => column.name), ...CHECKED_ADDED_COLUMNS].join(', ');
  return { problems, warnings, summary: `columns (${columns}), primary key (ns, id), expiry index` };
}

/** The task table's shape against {@link TASK_TABLE}: every column, the primary key, the principal and expiry indexes. */
export function checkTaskShape(dialect: Dialect, table: string, shape: TableShape): SqlSchemaCheck {
  const problems = requiredColumns(dialect, shape, TASK_TABLE.columns, false);
  if (shape.primaryKey !== TASK_TABLE.primaryKey.join(',')) problems.push('no PRIMARY KEY (ns, task_id): a task id could be stored twice');
  const warnings: string[] = [];
  const quoted = `"${table}"`;
  const fix = 'the store creates it at start (ensureSchema, the default); with ensureSchema: false run';
  if (!shape.indexes.some((cols) => cols.startsWith(PRINCIPAL_INDEX.columns.join(',')))) {
    warnings.push(
      `no index on (ns, principal, expires_at) (every create scans the table): ${fix} CREATE INDEX "${table}${PRINCIPAL_INDEX.suffix}" ON ${quoted} (ns, principal, expires_at)`,
    );
  }
  if (!firstColumnIs(shape.indexes, 'expires_at')) {
    warnings.push(
      `no index on expires_at (purges scan the table): ${fix} CREATE INDEX "${table}${EXPIRY_INDEX.suffix}" ON ${quoted} (expires_at)`,
    );
  }
  const columns = TASK_TABLE.columns.map((column) => column.name).join(', ');
  return { problems, warnings, summary: `columns (${columns}), primary key (ns, task_id), principal and expiry indexes` };
}

/**
 * What `ensureSchema()` makes of one store's tables: the main table (whose `added` columns a table of an earlier
 * version may lack), its indexes and its side table.
 */
export interface SchemaPlan {
  /** The quoted, possibly schema-qualified table. */
  table: string;
  tableName: string;
  createTable: string;
  added: readonly AddedColumn[];
  /** Index names (unquoted, as the catalog holds them) and their DDL. */
  indexes: readonly { name: string; create: string }[];
  /**
   * The side tables (replay: the outcome budget, the ledger epoch and the key fingerprints; task: the counts): each its unquoted name, its
   * quoted (possibly schema-qualified) name, its DDL.
   */
  sides: readonly { name: string; table: string; create: string }[];
}

type IndexSpec = typeof EXPIRY_INDEX | typeof PRINCIPAL_INDEX;

/**
 * The plan of the replay table (its expiry index, its outcome budget table `<table>_budget`, its epoch table
 * `<table>_epoch`, its key fingerprint table `<table>_keys`) or of the task table
 * (its principal and expiry indexes, its count table `<table>_counts`). `qualify` puts a quoted name in the store's
 * schema (PostgreSQL).
 */
export function schemaPlan(
  dialect: Dialect,
  kind: 'replay' | 'task',
  table: string,
  tableName: string,
  qualify: (quotedName: string) => string = (name) => name,
): SchemaPlan {
  const index = (spec: IndexSpec) => ({
    name: `${tableName}${spec.suffix}`,
    create: createIndexSql(`"${tableName}${spec.suffix}"`, table, spec.columns),
  });
  const side = (suffix: string, declaration: TableDeclaration) => {
    const sideTable = qualify(`"${tableName}${suffix}"`);
    return { name: `${tableName}${suffix}`, table: sideTable, create: createTableSql(dialect, sideTable, declaration) };
  };
  return {
    table,
    tableName,
    createTable: createTableSql(dialect, table, kind === 'replay' ? REPLAY_TABLE : TASK_TABLE),
    added: kind === 'replay' ? ADDED_COLUMNS : [],
    indexes: kind === 'replay' ? [index(EXPIRY_INDEX)] : [index(PRINCIPAL_INDEX), index(EXPIRY_INDEX)],
    sides:
      kind === 'replay'
        ? [side('_budget', BUDGET_TABLE), side(EPOCH_SUFFIX, EPOCH_TABLE), side(KEYS_SUFFIX, KEYS_TABLE)]
        : [side('_counts', COUNTS_TABLE)],
  };
}

/** A side table of the replay table checked with it: what it holds, its declaration, what fails without it. */
interface CheckedSide {
  readonly suffix: string;
  readonly declaration: TableDeclaration;
  /** What the table holds (in the warning when it is missing). */
  readonly holds: string;
  /** What fails until it exists, with ensureSchema: false. */
  readonly fails: string;
  /** The problem of a table without its primary key. */
  readonly noKey: string;
}

const CHECKED_SIDES: readonly CheckedSide[] = [
  {
    suffix: EPOCH_SUFFIX,
    declaration: EPOCH_TABLE,
    holds: 'the ledger epoch',
    fails: 'every consume fails',
    noKey: 'the ledger epoch is not one per namespace',
  },
  {
    suffix: KEYS_SUFFIX,
    declaration: KEYS_TABLE,
    holds: "the fleet check's key fingerprints",
    fails: 'the fleet key check (checkKeys) fails',
    noKey: 'a kid could be held twice',
  },
];

/**
 * A side table's shape against its declaration, added to the replay table's check: of another shape fails; missing
 * warns with its DDL (the store creates it with ensureSchema, the default; with ensureSchema: false what needs it
 * fails until it exists).
 */
function checkSideShape(dialect: Dialect, table: string, side: CheckedSide, shape: TableShape | undefined, check: SqlSchemaCheck): void {
  const name = `${table}${side.suffix}`;
  if (shape === undefined) {
    const create = createTableSql(dialect, `"${name}"`, side.declaration);
    check.warnings.push(
      `no table ${name} (${side.holds}, of an earlier version): the store creates it before its first consume (ensureSchema, the default); with ensureSchema: false ${side.fails} until a migration runs ${create}`,
    );
    return;
  }
  for (const problem of requiredColumns(dialect, shape, side.declaration.columns, true)) check.problems.push(`${name}: ${problem}`);
  const key = side.declaration.primaryKey.join(',');
  if (shape.primaryKey !== key) check.problems.push(`${name}: no PRIMARY KEY (${side.declaration.primaryKey.join(', ')}): ${side.noKey}`);
  const columns = side.declaration.columns.map((column) => column.name).join(', ');
  check.summary += `, ${side.suffix === EPOCH_SUFFIX ? 'epoch' : 'key fingerprint'} table ${name} (${columns})`;
}

/** The side tables checked with the replay table, by name (`<table>_epoch`, `<table>_keys`). */
export const checkedSideTables = (table: string): string[] => CHECKED_SIDES.map((side) => `${table}${side.suffix}`);

/**
 * A table's shape against the replay or the task table's declaration; `undefined` (no table) stays so. For the replay
 * table, `sides` holds the shapes of its side tables checked with it ({@link checkedSideTables}, in that order:
 * `undefined` for one that does not exist).
 */
export function checkShape(
  dialect: Dialect,
  kind: 'replay' | 'task',
  table: string,
  shape: TableShape | undefined,
  sides: readonly (TableShape | undefined)[] = [],
): SqlSchemaCheck | undefined {
  if (shape === undefined) return undefined;
  if (kind === 'task') return checkTaskShape(dialect, table, shape);
  const check = checkReplayShape(dialect, table, shape);
  for (const [i, side] of CHECKED_SIDES.entries()) checkSideShape(dialect, table, side, sides[i], check);
  return check;
}
