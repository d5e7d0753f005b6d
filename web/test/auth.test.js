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
