/** `--name value` options of the benchmark commands. */
export function optionArg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}

export function numberArg(name: string, fallback: number): number {
  const value = optionArg(name);
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number, got ${value}`);
  return n;
}
