// Run once when the page loads (launch(js=...)): the presentation mode from the URL, and its
// keys: Space or the right arrow presses Step, unless focus is in a field (__FIELDS__) or, for
// Space, on something Space presses anyway (__PRESSABLE__); the prompt's tooltip; and the watch
// on a pressed Run (assets/queue-watch.js). Filled in by specviz.ui.present.
() => {
  const root = document.documentElement;
  // the prompt's whole text as its tooltip, where its box shows only part of it
  document.addEventListener('mouseover', (e) => {
    const t = e.target instanceof Element ? e.target.closest('#sv-prompt textarea') : null;
    if (t) t.title = t.value;
  });
  if ((__FROM_URL__)()) root.classList.add(__ROOT_CLASS__);
  document.addEventListener('keydown', (e) => {
    if (!root.classList.contains(__ROOT_CLASS__)) return;
    if (e.key !== ' ' && e.key !== 'ArrowRight') return;
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey || e.isComposing) return;
    const t = e.target instanceof Element ? e.target : null;
    if (t && t.closest(__FIELDS__)) return;
    if (e.key === ' ' && t && t.closest(__PRESSABLE__)) return;
    const step = document.getElementById('sv-step');
    if (!step) return;
    e.preventDefault();
    if (!e.repeat) step.click();
  });
  (__QUEUE_WATCH__)();
}
