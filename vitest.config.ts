import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    // The database failover on a Patroni cluster takes minutes and Debian's patroni, etcd-server,
    // postgresql-15 and iptables: `npm run test:failover` runs it, `npm run bench:failover` its long form.
    exclude: [...configDefaults.exclude, ...(process.env.FACE_TEST_FAILOVER ? [] : ['test/integration/patroni-failover.test.ts'])],
    // One PostgreSQL server for the run (embedded in a temp dir, or DATABASE_URL); each file makes its own database on it.
    globalSetup: ['test/global-setup.ts'],
    // Two cores: model-heavy suites run one file at a time so timings stay sane.
    pool: 'forks',
    maxWorkers: 1,
    fileParallelism: false,
    testTimeout: 120_000,
    // The recogniser's default follows the processor (AVX-512 or not), and CI draws either kind:
    // every test runs the same one. Tests of the default itself unset it.
    env: { FACE_RECOGNIZER: 'sface:mirror' },
    hookTimeout: 180_000,
  },
});
