// Where the media of a generation lives (docs/API.md): result_url and
// poster_url on the row; `references` (one per image_ids entry, in order)
// and `last_image` describe the uploads with their kind and URLs.

export function resultUrl(g) {
  return g?.result_url || null;
}

export function posterUrl(g) {
  return g?.poster_url || null;
}

function fromUpload(r) {
  const kind = r.kind || 'image';
  return {
    id: r.image_id || r.id,
    kind,
    url: r.url || null,
    thumb: r.poster_url || (kind === 'image' ? r.url : null) || null,
    name: r.original_name || null,
    duration: r.duration_seconds ?? null,
    width: r.width || null,
    height: r.height || null,
  };
}

/** The generation's references in request order, then the last frame: {id, kind, url, thumb, label}. */
export function referencesOf(g) {
  if (!g) return [];
  const refs = Array.isArray(g.references) && g.references.length
    ? g.references.map(fromUpload)
    : (g.image_ids || []).map((id) => ({ id, kind: 'image', url: null, thumb: null }));
  const partition = g.partition || 'fl2va';
  let n = 0;
  const out = refs.map((r, i) => {
    let label;
    if (i === 0 && r.kind === 'image' && partition === 'fl2va') label = 'First frame';
    else label = `${r.kind === 'audio' ? 'Audio' : r.kind === 'video' ? 'Video' : 'Image'} ${++n}`;
    return { ...r, label };
  });
  if (g.last_image_id) {
    const last = g.last_image ? fromUpload(g.last_image) : { id: g.last_image_id, kind: 'image', url: null, thumb: null };
    out.push({ ...last, label: 'Last frame', last: true });
  }
  return out;
}
