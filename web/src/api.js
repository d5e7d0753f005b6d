// The HTTP API (docs/API.md): thin fetch wrappers that turn non-2xx answers
// into ApiError carrying the server's own message, so the UI can show it.

export const STATUSES = ['queued', 'processing', 'succeeded', 'failed', 'cancelled'];
export const ACTIVE = new Set(['queued', 'processing']);

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
    this.field = body && typeof body === 'object' ? (body.error && body.error.field) || body.field : undefined;
  }
}

/** Pulls a readable message out of whatever error body the server sent. */
export function errorMessage(status, body, fallback) {
  if (body && typeof body === 'object') {
    // docs/API.md: status_message is the whole sentence (field, what, accepted).
    if (typeof body.status_message === 'string' && body.status === 'error') return body.status_message;
    const e = body.error;
    const msg =
      (typeof e === 'string' && e) ||
      (e && typeof e === 'object' && (e.message || e.detail)) ||
      body.message || body.error_message || body.status_message || body.detail;
    const field = body.field || (e && typeof e === 'object' && e.field);
    if (msg) return field && !String(msg).includes(field) ? `${field}: ${msg}` : String(msg);
  }
  if (typeof body === 'string' && body.trim() && !body.trim().startsWith('<')) return body.trim().slice(0, 300);
  return fallback || `HTTP ${status}`;
}

async function readBody(res) {
  const text = await res.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch { return text; }
}

/**
 * A server that requires access tokens answers 401 without the login cookie
 * (docs/SECURITY.md): go to its login page, which comes back here after.
 */
export function loginRedirect(loc = typeof window !== 'undefined' ? window.location : null) {
  if (!loc || loc.pathname === '/login') return false;
  loc.assign(`/login?next=${encodeURIComponent(loc.pathname + loc.search)}`);
  return true;
}

export async function request(method, path, body, { signal, headers } = {}) {
  const init = { method, signal, headers: { Accept: 'application/json', ...headers } };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `The server cannot be reached (${method} ${path}): ${e.message}`);
  }
  if (res.status === 401) loginRedirect();
  const data = await readBody(res);
  if (!res.ok) throw new ApiError(res.status, errorMessage(res.status, data, `${method} ${path} failed: HTTP ${res.status} ${res.statusText}`), data);
  return data;
}

/** A generation as the UI uses it, whatever optional fields the row lacks. */
export function normalize(g) {
  if (!g || typeof g !== 'object') return g;
  const out = { ...g };
  if (!out.generation_id && out.id) out.generation_id = out.id;
  const p = out.progress && typeof out.progress === 'object' ? out.progress : {};
  if (typeof out.progress === 'object' && out.progress !== null) out.progress = typeof p.fraction === 'number' ? p.fraction : undefined;
  out.stage = out.stage ?? p.stage ?? null;
  out.step = out.step ?? p.step ?? null;
  out.total_steps = out.total_steps ?? p.total_steps ?? p.total ?? out.steps ?? null;
  if (out.references && !Array.isArray(out.references)) out.references = [];
  return out;
}

export const api = {
  list({ statuses, search, rating, limit = 40, offset = 0 }, opts) {
    const q = new URLSearchParams();
    q.set('status', (statuses && statuses.length ? statuses : STATUSES).join(','));
    if (search) q.set('search', search);
    if (rating) q.set('rating', rating);
    q.set('limit', String(limit));
    q.set('offset', String(offset));
    return request('GET', `/api/ai/queue?${q}`, undefined, opts).then((d) => ({
      count: d?.count ?? 0,
      generations: (d?.generations || []).map(normalize),
    }));
  },
  get: (id, opts) => request('GET', `/api/ai/queue/${encodeURIComponent(id)}`, undefined, opts).then((d) => normalize(d?.generation || d)),
  enqueue: (body) => request('POST', '/api/ai/queue', body),
  rate: (id, rating) => request('PATCH', `/api/ai/queue/${encodeURIComponent(id)}`, { rating }),
  remove: (id) => request('DELETE', `/api/ai/queue/${encodeURIComponent(id)}`),
  status: (opts) => request('GET', '/api/status', undefined, opts),
  /** The adapters a worker can apply (GET /api/loras): {published, loras: [{name, family, rank, preset, forwards, error, ...}]}. */
  loras: (opts) => request('GET', '/api/loras', undefined, opts),
  settings: () => request('GET', '/api/settings'),
  saveSettings: (s) => request('PUT', '/api/settings', s),
  /** Uploads one file; resolves to the server's description of it. */
  upload(file, { signal } = {}) {
    const form = new FormData();
    form.append('files', file, file.name || 'upload');
    return request('POST', '/api/images', form, { signal }).then((d) => {
      const item = (d?.images && d.images[0]) || {};
      const id = item.image_id || item.id || (d?.image_ids && d.image_ids[0]);
      if (!id) throw new ApiError(200, 'The upload answer carried no image id.', d);
      return { ...item, image_id: id };
    });
  },
};

/** The first enqueued generation of a POST /api/ai/queue answer, and any warnings. */
export function enqueued(answer) {
  const gens = (answer && answer.generations) || [];
  const warnings = [].concat(answer?.warnings || [], ...gens.map((g) => g.warnings || []));
  return { generation: gens[0] ? normalize(gens[0]) : null, generations: gens.map(normalize), warnings };
}
