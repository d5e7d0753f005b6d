import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError, loginRedirect, request } from '../src/api.js';

// A server that requires access tokens answers 401 until the login cookie is
// set (docs/SECURITY.md); the app then goes to the server's login page and
// asks to come back to where it was.
afterEach(() => vi.unstubAllGlobals());

function fakeLocation(pathname, search = '') {
  return { pathname, search, assign: vi.fn() };
}

describe('login redirect', () => {
  it('sends the browser to /login with the page to return to', () => {
    const loc = fakeLocation('/g/3f0e4c1a-9b2d-4e7f-8a6c-1d2e3f4a5b6c', '?x=1&y=2');
    expect(loginRedirect(loc)).toBe(true);
    expect(loc.assign).toHaveBeenCalledWith('/login?next=%2Fg%2F3f0e4c1a-9b2d-4e7f-8a6c-1d2e3f4a5b6c%3Fx%3D1%26y%3D2');
  });

  it('does not loop on the login page itself', () => {
    const loc = fakeLocation('/login', '?next=%2F');
    expect(loginRedirect(loc)).toBe(false);
    expect(loc.assign).not.toHaveBeenCalled();
  });

  it('a 401 answer still rejects with the server message', async () => {
    const body = { status: 'error', status_message: 'this server requires an access token', error: { field: null } };
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify(body), { status: 401 })));
    const assign = vi.fn();
    vi.stubGlobal('location', { pathname: '/', search: '', assign });
    const err = await request('GET', '/api/status').catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(401);
    expect(err.message).toBe('this server requires an access token');
  });
});

describe('a refused event stream', () => {
  const answer = (body) => vi.fn(async () => new Response(JSON.stringify(body), { status: 200 }));

  it('goes to the login page when the server wants a token we no longer have', async () => {
    const { checkSession } = await import('../src/sse.js');
    const loc = fakeLocation('/g/abc');
    const f = answer({ auth_required: true, authenticated: false, token_name: null });
    expect(await checkSession(f, loc)).toBe(true);
    expect(f).toHaveBeenCalledWith('/api/session', expect.anything());
    expect(loc.assign).toHaveBeenCalledWith('/login?next=%2Fg%2Fabc');
  });

  it('stays when the session is fine or no token is needed', async () => {
    const { checkSession } = await import('../src/sse.js');
    for (const body of [{ auth_required: true, authenticated: true }, { auth_required: false, authenticated: true }]) {
      const loc = fakeLocation('/');
      expect(await checkSession(answer(body), loc)).toBe(false);
      expect(loc.assign).not.toHaveBeenCalled();
    }
    const loc = fakeLocation('/');
    expect(await checkSession(vi.fn(async () => { throw new TypeError('network'); }), loc)).toBe(false);
  });
});
