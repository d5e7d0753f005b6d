import { useCallback, useEffect, useRef, useState } from 'react';
import Tile from './Tile.jsx';
import SelectionBar from './SelectionBar.jsx';
import { setRating } from '../actions.js';

const isTyping = (el) => el && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' || el.isContentEditable);

/**
 * The tile to move to from `from` with an arrow key, by where the tiles
 * are on screen (rows of the justified grid differ in length): left/right
 * in list order, up/down the tile of the row above/below nearest in x.
 */
export function neighbour(tiles, from, key) {
  const i = tiles.indexOf(from);
  if (i < 0) return null;
  if (key === 'ArrowLeft') return tiles[i - 1] || null;
  if (key === 'ArrowRight') return tiles[i + 1] || null;
  if (key === 'Home') return tiles[0] || null;
  if (key === 'End') return tiles[tiles.length - 1] || null;
  const r = from.getBoundingClientRect();
  const cx = r.left + r.width / 2;
  const down = key === 'ArrowDown';
  const rects = tiles.map((t) => ({ t, r: t.getBoundingClientRect() }));
  const beyond = rects.filter(({ r: c }) => (down ? c.top > r.top + 2 : c.top < r.top - 2));
  if (!beyond.length) return null;
  const rowTop = down ? Math.min(...beyond.map((x) => x.r.top)) : Math.max(...beyond.map((x) => x.r.top));
  const row = beyond.filter((x) => Math.abs(x.r.top - rowTop) < 3);
  row.sort((a, b) => Math.abs(a.r.left + a.r.width / 2 - cx) - Math.abs(b.r.left + b.r.width / 2 - cx));
  return row[0].t;
}

/** The tile grid, newest first, loading the next page as its end nears. */
export default function Gallery({ gallery, onLoadMore, onClearFilters, onReuse }) {
  const sentinel = useRef(null);
  const grid = useRef(null);
  const { items, loading, exhausted, error, query } = gallery;
  const [focusId, setFocusId] = useState(null);
  const [selected, setSelected] = useState(() => new Set());
  const anchor = useRef(null);
  // The list as of the last render, for callbacks that must stay the same
  // function (tiles are memoized) while the list changes.
  const itemsRef = useRef(items);
  itemsRef.current = items;

  useEffect(() => {
    const el = sentinel.current;
    if (!el || typeof IntersectionObserver === 'undefined') return;
    const io = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) onLoadMore();
    }, { rootMargin: '800px 0px' });
    io.observe(el);
    return () => io.disconnect();
  }, [onLoadMore, items.length, exhausted]);

  // A selection keeps only rows that are still listed (deleted, filtered out).
  useEffect(() => {
    setSelected((s) => {
      if (!s.size) return s;
      const listed = new Set(items.map((g) => g.generation_id));
      const kept = new Set([...s].filter((id) => listed.has(id)));
      return kept.size === s.size ? s : kept;
    });
  }, [items]);

  const select = useCallback((id, { range = false } = {}) => {
    setSelected((s) => {
      const next = new Set(s);
      if (range && anchor.current) {
        const ids = itemsRef.current.map((g) => g.generation_id);
        const a = ids.indexOf(anchor.current), b = ids.indexOf(id);
        if (a >= 0 && b >= 0) {
          for (let k = Math.min(a, b); k <= Math.max(a, b); k++) next.add(ids[k]);
          return next;
        }
      }
      if (next.has(id)) next.delete(id); else next.add(id);
      anchor.current = id;
      return next;
    });
  }, []);
  const clearSelection = useCallback(() => { setSelected(new Set()); anchor.current = null; }, []);

  // Esc clears a selection (the lightbox and dialogs handle their own Esc).
  useEffect(() => {
    if (!selected.size) return;
    const onKey = (e) => { if (e.key === 'Escape' && !document.querySelector('dialog[open]') && !isTyping(e.target)) clearSelection(); };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [selected.size, clearSelection]);

  const focusable = items.some((g) => g.generation_id === focusId) ? focusId : items[0]?.generation_id;
  const focusTile = (el) => {
    const link = el && el.querySelector('[data-testid=tile-link]');
    if (link) { setFocusId(el.dataset.id); link.focus(); }
  };

  const onKeyDown = (e) => {
    const tileEl = e.target.closest && e.target.closest('[data-testid=tile]');
    if (!tileEl || e.altKey || e.ctrlKey || e.metaKey) return;
    const g = items.find((x) => x.generation_id === tileEl.dataset.id);
    if (!g) return;
    const key = e.key;
    let handled = true;
    if (['ArrowLeft', 'ArrowRight', 'ArrowUp', 'ArrowDown', 'Home', 'End'].includes(key)) {
      const tiles = [...grid.current.querySelectorAll('[data-testid=tile]')];
      const next = neighbour(tiles, tileEl, key);
      if (next) focusTile(next);
    } else if ((key === 'a' || key === 'A') && g.status === 'succeeded') setRating(g, g.rating === 'approved' ? null : 'approved');
    else if ((key === 'r' || key === 'R') && g.status === 'succeeded') setRating(g, g.rating === 'rejected' ? null : 'rejected');
    else if (key === 'x' || key === 'X' || (key === ' ' && selected.size)) select(g.generation_id, { range: e.shiftKey });
    else if ((key === 'u' || key === 'U') && onReuse) onReuse(g);
    else handled = false;
    if (handled) { e.preventDefault(); e.stopPropagation(); }
  };

  const filtered = Boolean(query.search || query.statuses.length || query.rating);
  const picked = selected.size ? items.filter((g) => selected.has(g.generation_id)) : [];
  return (
    <>
      {picked.length > 0 && <SelectionBar items={picked} onClear={clearSelection} />}
      <ul className="grid" data-testid="gallery" ref={grid} onKeyDown={onKeyDown} aria-label="Clips, newest first (arrow keys move, Enter opens, a approve, r reject, x select, u reuse)">
        {items.map((g) => (
          <li key={g.generation_id} className="grid-cell" style={{ '--ar': g.width > 0 && g.height > 0 ? g.width / g.height : 16 / 9 }}>
            <Tile g={g} selected={selected.has(g.generation_id)} selecting={selected.size > 0}
              tabIndex={g.generation_id === focusable ? 0 : -1} onSelect={select} onFocusTile={setFocusId} onReuse={onReuse} />
          </li>
        ))}
      </ul>
      {!loading && !error && items.length === 0 && (
        <div className="empty" data-testid="empty">
          {filtered ? (
            <>
              <p>Nothing matches {query.search ? `“${query.search}”` : 'this filter'}{query.search && (query.statuses.length || query.rating) ? ' with these filters' : ''}.</p>
              {onClearFilters && <button type="button" className="ghost" onClick={onClearFilters} data-testid="clear-filters">Show all clips</button>}
            </>
          ) : <p>No clips yet. Describe one below and press Enter.</p>}
        </div>
      )}
      {error && (
        <p className="empty error" role="alert">
          Could not load the gallery: {error} <button type="button" className="link" onClick={onLoadMore}>Retry</button>
        </p>
      )}
      <div ref={sentinel} className="sentinel" aria-hidden="true">{loading ? 'Loading…' : ''}</div>
      {!exhausted && !loading && !error && items.length > 0 && (
        <div className="more"><button type="button" className="ghost" onClick={onLoadMore}>Load more</button></div>
      )}
    </>
  );
}
