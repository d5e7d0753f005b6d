// What went wrong, in words for people: the server's errors (docs/API.md)
// name fields and routes for API clients; here they become what happened and
// what to do.

export const ACCEPTED_MEDIA = 'a picture (PNG, JPEG, WebP, GIF, BMP, TIFF), a video (mp4, mov, webm, mkv) or a sound (wav, mp3, flac, ogg, m4a)';

const apiMessage = (e) => {
  const b = e && e.body;
  const m = b && typeof b === 'object' && b.error && typeof b.error === 'object' ? b.error.message : null;
  return typeof m === 'string' && m ? m : null;
};

/** Why an upload of `name` was refused, and what to do instead. */
export function uploadProblem(e, name) {
  if (!e) return 'the upload failed.';
  const retry = e.body && typeof e.body === 'object' ? e.body.retry_after : null;
  if (e.status === 0) return 'the server cannot be reached. Check the connection and attach it again.';
  if (e.status === 413) return 'it is larger than this server accepts in one upload.';
  if (e.status === 429) return `too many uploads just now. Try again${retry ? ` in ${retry} s` : ' in a moment'}.`;
  if (e.status === 401) return 'you are not logged in any more. Log in again, then attach it.';
  if (e.status >= 500) return `the server had a problem storing it (${apiMessage(e) || e.message}). Try again.`;
  let what = apiMessage(e) || e.message || '';
  // "'photo.heic': not a picture ... (Invalid data ...)": the name is on the chip already.
  what = what.replace(/^files\[\d+\]:\s*/, '');
  if (name) what = what.split(`'${name}': `).join('').split(`${name}: `).join('');
  what = what.replace(/;\s*accepted:.*$/i, '').trim();
  return `${what ? `${what.replace(/\.$/, '')}. ` : ''}This server takes ${ACCEPTED_MEDIA}.`;
}

/**
 * A refused prompt rewrite: {text, settings} where settings says the fix is
 * in the settings dialog (rewrite off, no Oxen API key stored).
 */
export function rewriteProblem(e) {
  const accepted = e && e.body && typeof e.body === 'object' && e.body.error ? String(e.body.error.accepted || '') : '';
  if (e && e.status === 409 && /oxen_api_key/.test(accepted)) {
    return { text: 'Rewriting needs an Oxen API key, and none is stored. Add one in Settings, or send the prompt as you wrote it.', settings: true };
  }
  if (e && e.status === 409 && /rewrite_enabled/.test(accepted)) {
    return { text: 'Prompt rewriting is switched off. Switch it on in Settings, or send the prompt as you wrote it.', settings: true };
  }
  if (e && e.status === 429) return { text: 'Too many rewrites just now. Wait a moment and try again, or send the prompt as you wrote it.', settings: false };
  if (e && e.status === 0) return { text: 'The server cannot be reached. Check the connection, or try again.', settings: false };
  return { text: `The rewrite failed: ${(e && (apiMessage(e) || e.message)) || 'no reason given'}.`, settings: false };
}
