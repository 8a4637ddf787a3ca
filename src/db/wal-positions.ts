/**
 * The primary's WAL positions at recent times, from which a replica's replay position bounds
 * its lag (read-replica.ts): a replica that has replayed past a position P read at time t holds
 * everything committed before t.
 */
export class WalPositions {
  private positions: Array<{ at: number; lsn: bigint }> = [];

  /** `keepMs`: how long a position is kept; older ones can no longer matter. */
  constructor(private readonly keepMs: number) {}

  /** Records that the primary's WAL had reached `lsn` by time `at`; forgets what can no longer matter. */
  remember(at: number, lsn: string): void {
    this.positions = this.positions.filter((p) => at - p.at <= this.keepMs);
    this.positions.push({ at, lsn: parseLsn(lsn) });
  }

  /** The latest time by which everything the primary had committed is replayed at `replayed`. */
  replayedSince(replayed: string): number | undefined {
    const lsn = parseLsn(replayed);
    let since: number | undefined;
    for (const p of this.positions) if (p.lsn <= lsn && (since === undefined || p.at > since)) since = p.at;
    return since;
  }
}

/** A WAL position ("16/B374D848") as a number that compares like one. */
function parseLsn(text: string): bigint {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}
