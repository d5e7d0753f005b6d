import { useEffect, useRef } from 'react';
import { XIcon } from './bits.jsx';

/**
 * A modal on the native <dialog>: the browser traps focus, makes the page
 * behind inert and turns Esc into a cancel event. Focus returns to where it
 * was when the modal closes.
 */
export default function Modal({ className = '', label, onClose, children, onKeyDownCapture, testId, closeLabel = 'Close' }) {
  const ref = useRef(null);
  useEffect(() => {
    const dlg = ref.current;
    const previous = document.activeElement;
    if (dlg && typeof dlg.showModal === 'function' && !dlg.open) {
      try { dlg.showModal(); } catch { dlg.setAttribute('open', ''); }
    } else if (dlg) dlg.setAttribute('open', '');
    // Start on the dialog itself (not its first button) unless a field asked for focus.
    if (dlg && !dlg.querySelector('[autofocus]') && typeof dlg.focus === 'function') dlg.focus();
    return () => {
      if (dlg && dlg.open && typeof dlg.close === 'function') dlg.close();
      if (previous && typeof previous.focus === 'function' && document.contains(previous)) previous.focus();
    };
  }, []);
  return (
    <dialog
      ref={ref}
      className={`modal ${className}`}
      tabIndex={-1}
      aria-label={label}
      data-testid={testId}
      onCancel={(e) => { e.preventDefault(); onClose(); }}
      onKeyDownCapture={onKeyDownCapture}
      onMouseDown={(e) => { if (e.target === ref.current) onClose(); }}
    >
      <div className="modal-body">
        <button type="button" className="icon-button modal-close" aria-label={closeLabel} onClick={onClose} data-testid="modal-close"><XIcon /></button>
        {children}
      </div>
    </dialog>
  );
}
