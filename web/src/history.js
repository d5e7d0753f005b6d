// The prompts this browser sent, newest first, with their references and
// parameters: ↑/↓ in an empty prompt bar walks them (PromptBar.jsx). Kept in
// localStorage, so they stay across reloads and are this browser's own.

const KEY = 'mmh3-prompt-history';
export const HISTORY_MAX = 50;

function storage() {
  try { return typeof localStorage !== 'undefined' ? localStorage : null; } catch { return null; }
}

export function readHistory() {
  const s = storage();
  if (!s) return [];
  try {
    const list = JSON.parse(s.getItem(KEY) || '[]');
    return Array.isArray(list) ? list.filter((e) => e && typeof e.prompt === 'string') : [];
  } catch {
    return [];
  }
}

const sameEntry = (a, b) => a.prompt === b.prompt && JSON.stringify(a.refs) === JSON.stringify(b.refs) && JSON.stringify(a.params) === JSON.stringify(b.params);

/** Records a sent request: {prompt, params, refs: [{imageId, kind, name, thumb, last}]}. */
export function pushHistory(entry) {
  const s = storage();
  if (!s) return;
  const list = readHistory().filter((e) => !sameEntry(e, entry));
  list.unshift({ ...entry, at: Math.floor(Date.now() / 1000) });
  try { s.setItem(KEY, JSON.stringify(list.slice(0, HISTORY_MAX))); } catch { /* full or denied: history is a convenience */ }
}
