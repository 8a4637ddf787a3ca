import { describe, expect, it } from 'vitest';
import {
  allows,
  AnyTokenVerifier,
  authenticate,
  BOOTSTRAP_PRINCIPAL,
  checkGalleries,
  StaticTokenVerifier,
  tokenFromHeader,
  type Principal,
  tenantOf,
  type TokenVerifier,
} from './auth.js';
import { DomainError } from './errors.js';

const client: Principal = { name: 'app', tenant: tenantOf(2), operator: false, deployment: false, access: 'read', limits: {} };

describe('auth', () => {
  it('reads "Token <t>" headers only', () => {
    expect(tokenFromHeader('Token abc')).toBe('abc');
    expect(tokenFromHeader('token   abc ')).toBe('abc');
    expect(tokenFromHeader('Bearer abc')).toBeUndefined();
    expect(tokenFromHeader(undefined)).toBeUndefined();
  });

  it('accepts the configured token as the bootstrap operator, and nothing when none is configured', async () => {
    expect(await new StaticTokenVerifier('s3cret').verify('s3cret')).toBe(BOOTSTRAP_PRINCIPAL);
    expect(BOOTSTRAP_PRINCIPAL).toMatchObject({ tenant: 1, operator: true, deployment: true, access: 'write' });
    expect(await new StaticTokenVerifier('s3cret').verify('s3cre')).toBeUndefined();
    expect(await new StaticTokenVerifier(undefined).verify('')).toBeUndefined();
  });

  it('asks further verifiers in turn and answers with the first principal', async () => {
    const store: TokenVerifier = { verify: async (t) => (t === 'from-db' ? client : undefined) };
    const v = new AnyTokenVerifier([new StaticTokenVerifier('boot'), store]);
    expect(await v.verify('from-db')).toBe(client);
    expect(await v.verify('boot')).toBe(BOOTSTRAP_PRINCIPAL);
    expect(await v.verify('other')).toBeUndefined();
  });

  it('answers 401 AUTH_FAILED, or the principal', async () => {
    const v = new StaticTokenVerifier('boot');
    await expect(authenticate(undefined, v)).rejects.toMatchObject({ code: 'AUTH_FAILED' });
    await expect(authenticate('Token nope', v)).rejects.toBeInstanceOf(DomainError);
    await expect(authenticate('Token boot', v)).resolves.toBe(BOOTSTRAP_PRINCIPAL);
  });

  it('orders access levels: write includes read includes analyze', () => {
    expect(allows('write', 'read')).toBe(true);
    expect(allows('read', 'analyze')).toBe(true);
    expect(allows('read', 'write')).toBe(false);
    expect(allows('analyze', 'read')).toBe(false);
  });

  it('holds a token limited to galleries to naming them', () => {
    const limited = { galleries: ['a', 'b'] };
    expect(() => checkGalleries(limited, ['a'])).not.toThrow();
    expect(() => checkGalleries(limited, ['a', 'c'])).toThrow(/gallery c/);
    // The whole tenant (no gallery, or default) is beyond it.
    expect(() => checkGalleries(limited, [])).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    expect(() => checkGalleries(limited, ['default'])).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
    expect(() => checkGalleries({}, [])).not.toThrow();
  });
});
