/**
 * API token administration:
 * `npm run token -- create <name> [--operator] | list | revoke <id>`.
 *
 * Uses the same database as the service (DATABASE_URL, else the embedded
 * server in FACE_DATA_DIR). When the service is running on the embedded
 * server, this joins it and leaves it running; otherwise it starts the
 * server for the duration of the command. A data folder without a database
 * is refused unless --create-database is given: a mistyped FACE_DATA_DIR
 * would otherwise make a token in a new, empty database that no service
 * reads. A revocation reaches running services at once (they listen for it).
 */
import { DomainError } from '../errors.js';
import { TokenStore } from '../db/tokens.js';
import { runCli, withServiceDatabase } from './run.js';

const USAGE = `usage: npm run token -- create <name> [--operator] | list | revoke <id>    [--create-database]
  create     a token for an application: it reaches the data (faces, galleries, identify, history)
  --operator the token also reaches /metrics and /v0/admin/*, as the first token made at first start does
  --create-database  make the database in FACE_DATA_DIR when it has none`;

async function main(argv: string[]): Promise<number> {
  const flags = new Set(argv.filter((a) => a.startsWith('--')));
  const [command, arg] = argv.filter((a) => !a.startsWith('--'));
  const unknownFlag = [...flags].find((f) => !['--operator', '--create-database'].includes(f));
  const valid =
    !unknownFlag &&
    ((command === 'create' && !!arg?.trim()) || command === 'list' || (command === 'revoke' && /^\d+$/.test(arg ?? ''))) &&
    (command === 'create' || !flags.has('--operator'));
  if (!valid) {
    process.stderr.write(`${unknownFlag ? `unknown option ${unknownFlag}\n` : ''}${USAGE}\n`);
    return 2;
  }
  return withServiceDatabase(
    async (db) => {
      const tokens = new TokenStore(db.sql);
      if (command === 'create') {
        const name = arg.trim();
        const operator = flags.has('--operator');
        let made;
        try {
          made = await tokens.create(name, { operator });
        } catch (err) {
          if (err instanceof DomainError && err.code === 'CONFLICT') {
            process.stderr.write(`${err.message}\n`);
            return 1;
          }
          throw err;
        }
        process.stdout.write(
          `id: ${made.id}\nname: ${name}\nrole: ${operator ? 'operator (data, /metrics, /v0/admin/*)' : 'client (data)'}\n` +
            `token: ${made.token}\n(shown once; only its hash is stored)\n`,
        );
      } else if (command === 'list') {
        const rows = await tokens.list();
        if (rows.length === 0) process.stdout.write('no tokens\n');
        for (const t of rows) {
          const state = t.revoked_at ? `revoked ${t.revoked_at}` : 'active';
          process.stdout.write(`${t.id}\t${t.name}\t${t.operator ? 'operator' : 'client'}\tcreated ${t.created}\t${state}\n`);
        }
      } else {
        const id = Number(arg);
        if (!(await tokens.revoke(id))) {
          process.stderr.write(`no active token with id ${id}\n`);
          return 1;
        }
        process.stdout.write(`revoked token ${id}\n`);
      }
      return 0;
    },
    { createDatabase: flags.has('--create-database') },
  );
}

runCli('token', main);
