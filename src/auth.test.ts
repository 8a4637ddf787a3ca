import { describe, expect, it } from 'vitest';
import { AnyTokenVerifier, authenticate, StaticTokenVerifier, tokenFromHeader, type TokenVerifier } from './auth.js';
import { DomainError } from './errors.js';

describe('auth', () => {
  it('reads "Token <t>" headers only', () => {
    expect(tokenFromHeader('Token abc')).toBe('abc');
    expect(tokenFromHeader('token   abc ')).toBe('abc');
    expect(tokenFromHeader('Bearer abc')).toBeUndefined();
    expect(tokenFromHeader(undefined)).toBeUndefined();
  });

  it('accepts the configured token and nothing when none is configured', async () => {
    expect(await new StaticTokenVerifier('s3cret').verify('s3cret')).toBe(true);
    expect(await new StaticTokenVerifier('s3cret').verify('s3cre')).toBe(false);
    expect(await new StaticTokenVerifier(undefined).verify('')).toBe(false);
  });

  it('asks further verifiers in turn', async () => {
    const store: TokenVerifier = { verify: async (t) => t === 'from-db' };
    const v = new AnyTokenVerifier([new StaticTokenVerifier('boot'), store]);
    expect(await v.verify('from-db')).toBe(true);
    expect(await v.verify('boot')).toBe(true);
    expect(await v.verify('other')).toBe(false);
  });

  it('answers 401 AUTH_FAILED', async () => {
    const v = new StaticTokenVerifier('boot');
    await expect(authenticate(undefined, v)).rejects.toMatchObject({ code: 'AUTH_FAILED' });
    await expect(authenticate('Token nope', v)).rejects.toBeInstanceOf(DomainError);
    await expect(authenticate('Token boot', v)).resolves.toBeUndefined();
  });
});
