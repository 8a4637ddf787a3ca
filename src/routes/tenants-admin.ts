/**
 * Tenants, tokens and the audit log, for operators: /v0/admin/tenants,
 * /v0/admin/tokens, /v0/admin/audit. Operator tokens only (a client token is
 * 403 FORBIDDEN). The same as `npm run token` on the host, and recorded in
 * the audit log as the calling token's.
 *
 * A tenant's operator administers its own tenant: it lists, changes and reads
 * the audit of that tenant alone, and another tenant answers as an unknown
 * one. Creating, changing and deleting tenants (their state and limits, which
 * share the deployment among them), and making deployment operators, are a
 * deployment operator's (FACE_TOKEN, tokens made with `deployment`); the
 * tokens a tenant's operator makes may not be given more than its tenant's
 * limits.
 *
 * Decisions the spec leaves open:
 * - Tenants are named by their name in paths; tokens by their id.
 * - A new token is shown once, in the creation's answer; listings never hold it.
 * - A tenant's limits apply to each of its tokens; a token's own override them.
 */
import { z } from 'zod';
import { ACCESS_LEVELS } from '../auth.js';
import { boolParam, idParam, numberParam } from '../http/params.js';
import { principalOf, Reply, type RouteRegistry } from '../http/registry.js';
import {
  auditEntries,
  createTenant,
  createToken,
  deleteTenant,
  listTenants,
  listTokens,
  revokeToken,
  setTenantDisabled,
  setTenantLimits,
  type TenantAdminDeps,
} from '../services/tenants.js';
import { indexLagHeaders } from './face-view.js';
import { galleryList, galleryName } from './schemas.js';

const tenantName = galleryName.meta({ description: 'Tenant name: 1 to 48 characters from a-z, A-Z, 0-9, _ and -.' });
const tenantPath = z.object({ name: tenantName });

const ratePerS = numberParam(z.number().positive().max(1_000_000)).meta({ description: 'Requests per second of each token (a token bucket of one second).' });
const photosInFlight = numberParam(z.number().int().positive().max(100_000)).meta({ description: 'Photo requests in progress at once of each token.' });

const tenantRecord = z.object({
  id: z.number().int(),
  name: z.string(),
  created: z.string(),
  disabled_at: z.string().nullable().meta({ description: 'When it was disabled; null while enabled.' }),
  rate_per_s: z.number().nullable().meta({ description: "Its tokens' requests per second; null: FACE_TOKEN_RATE_PER_S." }),
  photos_in_flight: z.number().int().nullable().meta({ description: "Its tokens' photo requests in progress; null: FACE_TOKEN_PHOTOS_IN_FLIGHT." }),
  tokens: z.number().int().meta({ description: 'Active tokens.' }),
  faces: z.number().int().meta({ description: 'Stored faces.' }),
});

const tokenRecord = z.object({
  id: z.number().int(),
  name: z.string(),
  tenant: z.string(),
  operator: z.boolean().meta({ description: "Reaches its tenant's administration." }),
  deployment: z.boolean().meta({ description: 'An operator of the deployment: every tenant, /metrics, the shards.' }),
  access: z.enum(ACCESS_LEVELS),
  galleries: z.array(z.string()).nullable().meta({ description: 'The only galleries it reaches; null: all of its tenant.' }),
  rate_per_s: z.number().nullable(),
  photos_in_flight: z.number().int().nullable(),
  created: z.string(),
  revoked_at: z.string().nullable(),
});

const auditEntry = z.object({
  id: z.number().int(),
  at: z.string().meta({ description: 'UTC, ISO 8601.' }),
  actor: z.string().meta({ description: 'The name of the token that acted; `cli` for the command line, `service` for the service itself.' }),
  token_id: z.number().int().nullable(),
  action: z.string().meta({ description: 'tenant.create, tenant.disable, tenant.enable, tenant.limits, tenant.delete, token.create, token.revoke, gallery.delete, shard.offline, shard.online, shard.rebuild, reembed.start, reembed.finish.' }),
  target: z.string().meta({ description: 'The tenant, token id, gallery or shard acted on.' }),
  detail: z.record(z.string(), z.unknown()),
});

const OPERATOR_NOTE = "Operator tokens only; a client token answers 403 FORBIDDEN. A tenant's operator sees and changes its own tenant alone.";
const DEPLOYMENT_NOTE = "Deployment operators only (FACE_TOKEN, tokens made with deployment); any other token answers 403 FORBIDDEN.";

export function registerTenantsAdmin(registry: RouteRegistry, deps: TenantAdminDeps): void {
  registry.define({
    method: 'GET',
    path: '/v0/admin/tenants',
    summary: 'Every tenant, with its state, limits, tokens and faces',
    description: OPERATOR_NOTE,
    auth: 'operator',
    response: { status: 200, description: 'The tenants.', schema: z.object({ results: z.array(tenantRecord) }) },
    errors: [],
    async handler(ctx) {
      return { results: await listTenants(deps, principalOf(ctx)) };
    },
  });

  registry.define({
    method: 'POST',
    path: '/v0/admin/tenants',
    summary: 'Create a tenant',
    description: `A tenant has its own galleries (its own default), faces and tokens. A taken name answers 409 CONFLICT. ${DEPLOYMENT_NOTE}`,
    auth: 'deployment',
    request: z.object({ name: tenantName, rate_per_s: ratePerS.optional(), photos_in_flight: photosInFlight.optional() }),
    response: { status: 201, description: 'The tenant.', schema: tenantRecord },
    errors: ['CONFLICT'],
    async handler(ctx) {
      const { name, rate_per_s, photos_in_flight } = ctx.input;
      return Reply.json(await createTenant(deps, principalOf(ctx), name, { rate_per_s, photos_in_flight }), 201);
    },
  });

  registry.define({
    method: 'PUT',
    path: '/v0/admin/tenants/:name',
    summary: "Change a tenant's state or the limits of its tokens",
    description:
      'disabled: true refuses every token of the tenant at once, on every node (401), keeping its data; false serves them again. ' +
      'A limit set to null falls back to the service default. The limits are what the deployment grants a tenant among the others, so ' +
      `they are set by the deployment's operators: a tenant's operator reads them in the listing. ${DEPLOYMENT_NOTE}`,
    auth: 'deployment',
    params: tenantPath,
    request: z.object({
      disabled: boolParam().optional().meta({ description: 'Disable (true) or enable (false) the tenant.' }),
      rate_per_s: ratePerS.nullable().optional(),
      photos_in_flight: photosInFlight.nullable().optional(),
    }),
    response: { status: 204, description: 'Changed.' },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      const { disabled, rate_per_s, photos_in_flight } = ctx.input;
      const actor = principalOf(ctx);
      if (disabled !== undefined) await setTenantDisabled(deps, actor, ctx.params.name, disabled);
      if (rate_per_s !== undefined || photos_in_flight !== undefined) await setTenantLimits(deps, actor, ctx.params.name, { rate_per_s, photos_in_flight });
      return Reply.empty(204);
    },
  });

  registry.define({
    method: 'DELETE',
    path: '/v0/admin/tenants/:name',
    summary: 'Delete a tenant with its faces, galleries and tokens',
    description: `Its tokens are refused at once; its faces leave search like any deleted face. The first tenant (default) cannot be deleted: 400. ${DEPLOYMENT_NOTE}`,
    auth: 'deployment',
    params: tenantPath,
    response: { status: 200, description: 'How many faces were deleted.', schema: z.object({ deleted: z.number().int() }) },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      const { deleted, indexLag } = await deleteTenant(deps, principalOf(ctx), ctx.params.name);
      return Reply.json({ deleted }, 200, indexLagHeaders(indexLag));
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/admin/tokens',
    summary: 'Every token, with its tenant and scopes (never the token itself)',
    description: OPERATOR_NOTE,
    auth: 'operator',
    response: { status: 200, description: 'The tokens.', schema: z.object({ results: z.array(tokenRecord) }) },
    errors: [],
    async handler(ctx) {
      return { results: await listTokens(deps, principalOf(ctx)) };
    },
  });

  registry.define({
    method: 'POST',
    path: '/v0/admin/tokens',
    summary: 'Create a token',
    description:
      'access: analyze (detect and verify only), read (no writes) or write (default). galleries: the only galleries of its tenant ' +
      'it reaches. The token is in this answer only; the service keeps its SHA-256. An active token of the same name answers 409; ' +
      `an unknown tenant 404. ${OPERATOR_NOTE}`,
    auth: 'operator',
    request: z.object({
      name: z.string().min(1).max(200).meta({ description: 'A name for people: listing and revoking.' }),
      tenant: tenantName.optional().meta({ description: "Its tenant; default: the caller's own for a tenant's operator, default (the first) for a deployment's." }),
      operator: boolParam().optional().meta({ description: "Also reaches its tenant's administration: its tenant, tokens and audit." }),
      deployment: boolParam()
        .optional()
        .meta({ description: 'An operator of the deployment: every tenant, /metrics, the shards. Only a deployment operator makes one (else 403).' }),
      access: z.enum(ACCESS_LEVELS).optional(),
      galleries: galleryList.optional(),
      rate_per_s: ratePerS.optional(),
      photos_in_flight: photosInFlight.optional(),
    }),
    response: {
      status: 201,
      description: 'The token, shown once.',
      schema: z.object({ id: z.number().int(), token: z.string().meta({ description: 'Send it as Authorization: Token <token>.' }) }),
    },
    errors: ['CONFLICT', 'NOT_FOUND'],
    async handler(ctx) {
      const { name, tenant, operator, deployment, access, galleries, rate_per_s, photos_in_flight } = ctx.input;
      const made = await createToken(deps, principalOf(ctx), name, { operator, deployment, access, galleries, ratePerS: rate_per_s, photosInFlight: photos_in_flight }, tenant);
      return Reply.json(made, 201);
    },
  });

  registry.define({
    method: 'DELETE',
    path: '/v0/admin/tokens/:id',
    summary: 'Revoke a token',
    description: `Refused from now on, on every node. ${OPERATOR_NOTE}`,
    auth: 'operator',
    params: z.object({ id: idParam('Token id.') }),
    response: { status: 204, description: 'Revoked.' },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      await revokeToken(deps, principalOf(ctx), ctx.params.id);
      return Reply.empty(204);
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/admin/audit',
    summary: 'Operator actions, newest first',
    description: `Who did what and when: tenants, tokens, gallery deletes, shard controls, re-embeddings. Page with before=<the last id seen>. ${OPERATOR_NOTE}`,
    auth: 'operator',
    request: z.object({
      limit: numberParam(z.number().int().min(1).max(1000)).default(100).meta({ description: 'At most this many entries; default 100.' }),
      before: numberParam(z.number().int().positive()).optional().meta({ description: 'Only entries with ids below this.' }),
    }),
    response: { status: 200, description: 'The entries.', schema: z.object({ results: z.array(auditEntry) }) },
    errors: [],
    async handler(ctx) {
      return { results: await auditEntries(deps, principalOf(ctx), ctx.input.limit, ctx.input.before) };
    },
  });
}
