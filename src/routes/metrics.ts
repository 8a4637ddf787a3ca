/**
 * GET /metrics: Prometheus exposition of the service's metrics (see
 * metrics/service-metrics.ts and docs/metrics.md).
 *
 * Operator token only: the numbers tell how many faces each shard holds and
 * how busy the service is, which an API client has no need to know, and
 * Prometheus sends `Authorization: Token …` from its scrape config. It
 * bypasses the concurrency limit, as /health does, so a saturated service can
 * still be watched.
 */
import { Reply, type RouteRegistry } from '../http/registry.js';
import type { ServiceMetrics } from '../metrics/service-metrics.js';

export function registerMetrics(registry: RouteRegistry, metrics: ServiceMetrics): void {
  registry.define({
    method: 'GET',
    path: '/metrics',
    summary: 'Prometheus metrics',
    description:
      'Text exposition format 0.0.4. Needs a deployment operator token (FACE_TOKEN, or one made with --deployment); any other token answers 403. Requests by route and status, latency, ' +
      'in-flight requests and 503s, engine queues, batch sizes and inference time by model, faces and state per ' +
      'search shard, index lag, PostgreSQL connections, photo fetch outcomes, and the Node.js process.',
    auth: 'deployment',
    limited: false,
    response: { status: 200, description: 'The metrics.', alternatives: [metrics.contentType] },
    errors: [],
    async handler({ server }) {
      return new Reply(200, await metrics.render(server), metrics.contentType);
    },
  });
}
