/**
 * Camera history administration:
 *
 *   npm run history -- partitions                 the monthly partitions of sightings
 *   npm run history -- detach --before YYYY-MM-DD detach every whole month ending by then
 *
 * Detaching takes a month out of history (searches, persons and friend
 * counts no longer see it) and leaves it, with its thumbnails, as two
 * standalone tables to archive (pg_dump -t …) and drop. Never the current
 * month. Same database as the service (DATABASE_URL, else the embedded server
 * in FACE_DATA_DIR).
 */
import { detachSightingPartitionsBefore, listSightingPartitions } from '../db/history-partitions.js';
import { runCli, withServiceDatabase } from './run.js';

const USAGE = 'usage: npm run history -- partitions | detach --before YYYY-MM-DD';

const day = (d: Date) => d.toISOString().slice(0, 10);

async function main(argv: string[]): Promise<number> {
  const [command, flag, value] = argv;
  const before = command === 'detach' && flag === '--before' && /^\d{4}-\d{2}-\d{2}$/.test(value ?? '') ? new Date(`${value}T00:00:00Z`) : undefined;
  if (command !== 'partitions' && !(before && !Number.isNaN(before.getTime()))) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  return withServiceDatabase(async (db) => {
    if (before) {
      const detached = await detachSightingPartitionsBefore(db.owner, before);
      if (detached.length === 0) process.stdout.write(`no whole month ends by ${value}\n`);
      for (const p of detached) process.stdout.write(`detached ${p.name} (${day(p.from)} to ${day(p.to)}), thumbnails in ${p.thumbnails}\n`);
    } else {
      for (const p of await listSightingPartitions(db.owner)) process.stdout.write(`${p.name}\t${day(p.from)}\t${day(p.to)}\n`);
    }
    return 0;
  });
}

runCli('history', main);
