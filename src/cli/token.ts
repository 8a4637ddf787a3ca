/**
 * API token administration: `npm run token -- create <name> | list | revoke <id>`.
 *
 * Uses the same database as the service (DATABASE_URL, else the embedded
 * server in FACE_DATA_DIR). When the service is running on the embedded
 * server, this joins it and leaves it running; otherwise it starts the
 * server for the duration of the command. A revocation reaches running
 * services at once (they listen for it).
 */
import { TokenStore } from '../db/tokens.js';
import { runCli, withServiceDatabase } from './run.js';

const USAGE = `usage: npm run token -- create <name> | list | revoke <id>`;

async function main(argv: string[]): Promise<number> {
  const [command, arg] = argv;
  if (!command || !['create', 'list', 'revoke'].includes(command)) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  if ((command === 'create' && !arg?.trim()) || (command === 'revoke' && !/^\d+$/.test(arg ?? ''))) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  return withServiceDatabase(async (db) => {
    const tokens = new TokenStore(db.sql);
    if (command === 'create') {
      const { id, token } = await tokens.create(arg.trim());
      process.stdout.write(`id: ${id}\nname: ${arg.trim()}\ntoken: ${token}\n(shown once; only its hash is stored)\n`);
    } else if (command === 'list') {
      const rows = await tokens.list();
      if (rows.length === 0) process.stdout.write('no tokens\n');
      for (const t of rows) {
        process.stdout.write(`${t.id}\t${t.name}\tcreated ${t.created}\t${t.revoked_at ? `revoked ${t.revoked_at}` : 'active'}\n`);
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
  });
}

runCli('token', main);
