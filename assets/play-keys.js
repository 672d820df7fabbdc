// js_on_load of the verifier game's board: its keys (__KEYS__: key -> button id) press the
// game's buttons while the board is on screen and no field (__FIELDS__) has focus. Added to
// the document once, however often the board is drawn. Filled in by specviz.ui.verifier_tab.
if (!window.svPlayKeys) {
  window.svPlayKeys = true;
  document.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.isComposing) return;
    const id = (__KEYS__)[e.key.toLowerCase()];
    if (!id) return;
    const board = document.querySelector('#sv-play-board .sv-play[data-phase]');
    if (!board || !board.checkVisibility()) return;
    const t = e.target instanceof Element ? e.target : null;
    if (t && t.closest(__FIELDS__)) return;
    const button = document.getElementById(id);
    if (!button || button.disabled) return;
    e.preventDefault();
    if (!e.repeat) button.click();
  });
}
