/**
 * Token and tenant administration on the host:
 *
 *   npm run token -- create <name> [--tenant T] [--operator] [--access analyze|read|write]
 *                                  [--galleries a,b] [--rate R] [--photos N]
 *   npm run token -- list | revoke <id>
 *   npm run token -- tenant create <name> [--rate R] [--photos N]
 *   npm run token -- tenant list | disable <name> | enable <name> | delete <name>
 *
 * Uses the same database as the service (DATABASE_URL, else the embedded
 * server in FACE_DATA_DIR). When the service is running on the embedded
 * server, this joins it and leaves it running; otherwise it starts the
 * server for the duration of the command. A data folder without a database
 * is refused unless --create-database is given: a mistyped FACE_DATA_DIR
 * would otherwise make a token in a new, empty database that no service
 * reads. A revocation, or a tenant disabled or deleted, reaches running
 * services at once (they listen for it). Every change is in the audit log,
 * as the CLI's.
 */
import { parseArgs } from 'node:util';
import { ACCESS_LEVELS, type Access } from '../auth.js';
import { CLI_ACTOR } from '../db/audit.js';
import { TenantStore } from '../db/tenants.js';
import { TokenStore } from '../db/tokens.js';
import { DomainError } from '../errors.js';
import { runCli, withServiceDatabase } from './run.js';

const USAGE = `usage: npm run token -- <command>    [--create-database]
  create <name>   a token for an application; it reaches the data of its tenant
    --tenant T      its tenant (default: default, the first)
    --operator      it also administers its tenant: its tokens, limits and audit (/v0/admin/*)
    --deployment    an operator of the deployment: every tenant, /metrics, the shards
    --access A      analyze (detect and verify only), read (no writes) or write (default)
    --galleries a,b only these galleries of its tenant
    --rate R        its requests per second; --photos N its photo requests in progress
  list            every token, with its tenant and scopes
  revoke <id>     refuse the token from now on, on every node
  tenant create <name> [--rate R] [--photos N]   a tenant, with the limits of each of its tokens
  tenant list | disable <name> | enable <name>
  tenant delete <name>   the tenant with its faces, galleries and tokens
  --create-database  make the database in FACE_DATA_DIR when it has none`;

const OPTIONS = {
  tenant: { type: 'string' },
  operator: { type: 'boolean' },
  deployment: { type: 'boolean' },
  access: { type: 'string' },
  galleries: { type: 'string' },
  rate: { type: 'string' },
  photos: { type: 'string' },
  'create-database': { type: 'boolean' },
} as const;

/** The options each command takes besides --create-database; any other is refused, not ignored. */
function optionsOf(command: string, sub: string | undefined): readonly string[] {
  if (command === 'create') return ['tenant', 'operator', 'deployment', 'access', 'galleries', 'rate', 'photos'];
  if (command === 'tenant' && sub === 'create') return ['rate', 'photos'];
  return [];
}

function positive(value: string | undefined, what: string, integer: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!(n > 0) || (integer && !Number.isInteger(n))) throw new UsageError(`${what} must be a positive ${integer ? 'integer' : 'number'}`);
  return n;
}

class UsageError extends Error {}

type Values = ReturnType<typeof parse>['values'];

function parse(argv: string[]) {
  return parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
}

async function tokenCommand(tokens: TokenStore, command: string, arg: string | undefined, v: Values): Promise<number> {
  if (command === 'create') {
    const name = arg?.trim();
    if (!name) throw new UsageError('create needs a name');
    const access = (v.access ?? 'write') as Access;
    if (!ACCESS_LEVELS.includes(access)) throw new UsageError(`--access is one of ${ACCESS_LEVELS.join(', ')}`);
    const galleries = v.galleries?.split(',').map((g) => g.trim()).filter(Boolean);
    const tenant = v.tenant ?? 'default';
    const made = await tokens.create(
      CLI_ACTOR,
      'deployment',
      name,
      { operator: v.operator ?? false, deployment: v.deployment ?? false, access, galleries, ratePerS: positive(v.rate, '--rate', false), photosInFlight: positive(v.photos, '--photos', true) },
      tenant,
    );
    process.stdout.write(
      `id: ${made.id}\nname: ${name}\ntenant: ${tenant}\nrole: ${v.deployment ? 'deployment operator (every tenant, /metrics, /v0/admin/*)' : v.operator ? `operator of ${tenant} (data, its administration)` : 'client (data)'}\n` +
        `access: ${access}${galleries ? `\ngalleries: ${galleries.join(', ')}` : ''}\n` +
        `token: ${made.token}\n(shown once; only its hash is stored)\n`,
    );
    return 0;
  }
  if (command === 'list') {
    // The host's database credentials reach every tenant.
    const rows = await tokens.list('deployment');
    if (rows.length === 0) process.stdout.write('no tokens\n');
    for (const t of rows) {
      const state = t.revoked_at ? `revoked ${t.revoked_at}` : 'active';
      const galleries = t.galleries ? `\tgalleries ${t.galleries.join(',')}` : '';
      process.stdout.write(`${t.id}\t${t.name}\ttenant ${t.tenant}\t${t.deployment ? 'deployment operator' : t.operator ? 'operator' : 'client'}\t${t.access}${galleries}\tcreated ${t.created}\t${state}\n`);
    }
    return 0;
  }
  if (command === 'revoke') {
    if (!/^\d+$/.test(arg ?? '')) throw new UsageError('revoke needs a token id');
    const id = Number(arg);
    if (!(await tokens.revoke(CLI_ACTOR, 'deployment', id))) {
      process.stderr.write(`no active token with id ${id}\n`);
      return 1;
    }
    process.stdout.write(`revoked token ${id}\n`);
    return 0;
  }
  throw new UsageError(`unknown command ${command}`);
}

async function tenantCommand(tenants: TenantStore, command: string | undefined, name: string | undefined, v: Values): Promise<number> {
  if (command === 'list') {
    for (const t of await tenants.list('deployment')) {
      const state = t.disabled_at ? `disabled ${t.disabled_at}` : 'enabled';
      const limits = `rate ${t.rate_per_s ?? 'default'}\tphotos ${t.photos_in_flight ?? 'default'}`;
      process.stdout.write(`${t.id}\t${t.name}\t${state}\t${t.tokens} tokens\t${t.faces} faces\t${limits}\n`);
    }
    return 0;
  }
  if (!name) throw new UsageError(`tenant ${command ?? ''} needs a name`);
  if (command === 'create') {
    const id = await tenants.create(CLI_ACTOR, name, { rate_per_s: positive(v.rate, '--rate', false), photos_in_flight: positive(v.photos, '--photos', true) });
    process.stdout.write(`created tenant ${name} (id ${id})\n`);
  } else if (command === 'disable' || command === 'enable') {
    await tenants.setDisabled(CLI_ACTOR, 'deployment', name, command === 'disable');
    process.stdout.write(`${command}d tenant ${name}\n`);
  } else if (command === 'delete') {
    const { faces } = await tenants.delete(CLI_ACTOR, name);
    process.stdout.write(`deleted tenant ${name} with ${faces} faces\n`);
  } else {
    throw new UsageError(`unknown tenant command ${command}`);
  }
  return 0;
}

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parse(argv);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const { values, positionals } = parsed;
  const [command, arg, third] = positionals;
  if (!command) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const stray = Object.keys(values).find((o) => o !== 'create-database' && !optionsOf(command, arg).includes(o));
  if (stray) {
    process.stderr.write(`${command}${command === 'tenant' ? ` ${arg ?? ''}` : ''} takes no --${stray}\n${USAGE}\n`);
    return 2;
  }
  try {
    return await withServiceDatabase(
      async (db) => {
        // The photos a tenant's deletion frees are queued; the service collects them (it holds the blobs).
        if (command === 'tenant') return await tenantCommand(new TenantStore(db.sql), arg, third, values);
        return await tokenCommand(new TokenStore(db.sql), command, arg, values);
      },
      { createDatabase: values['create-database'] ?? false },
    );
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n${USAGE}\n`);
      return 2;
    }
    if (err instanceof DomainError) {
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
    throw err;
  }
}

runCli('token', main);
