/**
 * Schema changes for tenants, applied when a store opens an object's SQLite (synchronously, in the
 * object's constructor path, so they commit together). Rows made before tenants keep working: their new
 * owner column is empty, which is the anonymous owner's (see tenant.ts).
 */

function columnsOf(sql: SqlStorage, table: string): Set<string> {
  return new Set(
    sql
      .exec<{ name: string }>(`PRAGMA table_info(${table})`)
      .toArray()
      .map((c) => c.name),
  );
}

/** Adds the columns `table` lacks (name → type and default): for changes that keep the table's keys. */
export function addMissingColumns(sql: SqlStorage, table: string, columns: Record<string, string>): void {
  const have = columnsOf(sql, table);
  for (const [name, type] of Object.entries(columns))
    if (!have.has(name)) sql.exec(`ALTER TABLE ${table} ADD COLUMN ${name} ${type}`);
}

/**
 * Creates `table` from `schema` (a CREATE TABLE statement for it). A table made by an older schema, one
 * without the `marker` column, is rebuilt: SQLite cannot change a primary key or a unique constraint in
 * place, so its rows are copied (the `kept` columns) into a table of the new schema.
 */
export function createOrRebuild(sql: SqlStorage, table: string, schema: string, marker: string, kept: string[]): void {
  const have = columnsOf(sql, table);
  if (have.size === 0) {
    sql.exec(schema);
    return;
  }
  if (have.has(marker)) return;
  const old = `${table}_before_tenants`;
  sql.exec(`ALTER TABLE ${table} RENAME TO ${old}`);
  sql.exec(schema);
  const columns = kept.filter((c) => have.has(c)).join(', ');
  sql.exec(`INSERT INTO ${table} (${columns}) SELECT ${columns} FROM ${old}`);
  sql.exec(`DROP TABLE ${old}`);
}
