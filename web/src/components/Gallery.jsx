import { useEffect, useRef } from 'react';
import Tile from './Tile.jsx';

/** The tile grid, newest first, loading the next page as its end nears. */
export default function Gallery({ gallery, onLoadMore, onClearFilters }) {
  const sentinel = useRef(null);
  const { items, loading, exhausted, error, query } = gallery;

  useEffect(() => {
    const el = sentinel.current;
    if (!el || typeof IntersectionObserver === 'undefined') return;
    const io = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) onLoadMore();
    }, { rootMargin: '800px 0px' });
    io.observe(el);
    return () => io.disconnect();
  }, [onLoadMore, items.length, exhausted]);

  const filtered = Boolean(query.search || query.statuses.length || query.rating);
  return (
    <>
      <ul className="grid" data-testid="gallery">
        {items.map((g) => (
          <li key={g.generation_id} className="grid-cell">
            <Tile g={g} />
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
