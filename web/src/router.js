// Deep links: an open lightbox is /g/<generation_id>; the gallery is /.
// history.state.inApp marks entries pushed by the app, so closing a
// lightbox that was opened from the gallery goes back instead of piling up
// history, while one opened from a pasted link or a refresh goes to /.
import { useSyncExternalStore } from 'react';

const ROUTE_EVENT = 'mmh3:navigate';

export function parsePath(pathname) {
  const m = /^\/g\/([^/?#]+)\/?$/.exec(pathname);
  return { generationId: m ? decodeURIComponent(m[1]) : null };
}

const subscribe = (fn) => {
  window.addEventListener('popstate', fn);
  window.addEventListener(ROUTE_EVENT, fn);
  return () => { window.removeEventListener('popstate', fn); window.removeEventListener(ROUTE_EVENT, fn); };
};
const getPath = () => window.location.pathname;

export function useRoute() {
  return parsePath(useSyncExternalStore(subscribe, getPath));
}

export function navigate(path, { replace = false } = {}) {
  if (path === window.location.pathname) return;
  const state = { inApp: true };
  if (replace) window.history.replaceState(state, '', path);
  else window.history.pushState(state, '', path);
  window.dispatchEvent(new Event(ROUTE_EVENT));
}

export const openGeneration = (id, opts) => navigate(`/g/${encodeURIComponent(id)}`, opts);

export function closeLightbox() {
  if (window.history.state && window.history.state.inApp && window.history.length > 1) {
    window.history.back();
  } else {
    navigate('/', { replace: true });
  }
}
